"""The names of the model backends, shared by the router and the worker.

The router's registry gives each model one of these names (``models.json``'s
``backend``); the gateway passes it on in ``GenerateRequest.backend``; the worker
serves it, or answers ``backend_unavailable`` when it knows the name but is not
configured for it. One list, so a name the registry accepts is never unknown to a
worker.
"""

from __future__ import annotations

SIMULATOR = "simulator"  # the CPU simulator, on every worker
CEREBRAS = "cerebras"  # Cerebras' hosted API (its SDK)
OPENAI_COMPATIBLE = "openai-compatible"  # a chat completions server: vLLM, SGLang, ...

BACKEND_NAMES = (SIMULATOR, CEREBRAS, OPENAI_COMPATIBLE)
