"""The live dashboard at ``/dashboard``: aggregates over all tenants of the gateway's
metrics (``sampler``), sampled only while someone watches (``live``), drawn by one page
(``page.html``)."""
