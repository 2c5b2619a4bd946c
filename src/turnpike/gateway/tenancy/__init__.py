"""Who may ask, and how much: API keys, tenants, limits, admission and shedding."""
