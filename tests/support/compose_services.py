"""What the container stack of the tests runs (compose.yaml with its Redis profile on;
Jaeger too, only when its image exists)."""

GATEWAYS = frozenset({"gateway-1", "gateway-2"})
BACKENDS = frozenset({"safety", "tokenizer", "router", "billing", "imageres"})
WORKERS = frozenset({"worker-1", "worker-2"})
TURNPIKE_SERVICES = GATEWAYS | BACKENDS | WORKERS
STACK_SERVICES = TURNPIKE_SERVICES | {"haproxy", "redis", "prometheus"}
