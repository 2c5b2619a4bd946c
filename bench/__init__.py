"""Benchmarks of Turnpike (``python -m bench.services``: each backend service's own work)."""
