"""Service benchmarks: each backend service's own work, in-process and over gRPC.

``python -m bench.services [--quick] [--out DIR] [--only tokenizer,safety,...]`` writes
``<service>.json``, ``<service>.md``, plots and a combined ``README.md`` to ``DIR``.
"""
