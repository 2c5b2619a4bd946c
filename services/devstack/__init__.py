"""The whole Turnpike stack as local processes on loopback (``make run``, test fixtures).

``python -m devstack`` runs it in the foreground; ``LocalStack`` is the library behind it.
"""

from devstack.stack import (
    DEV_API_KEY,
    LocalStack,
    ServiceSpec,
    StackConfig,
    StackEndpoints,
    StackError,
    build_env,
    default_services,
    pick_free_ports,
)

__all__ = [
    "DEV_API_KEY",
    "LocalStack",
    "ServiceSpec",
    "StackConfig",
    "StackEndpoints",
    "StackError",
    "build_env",
    "default_services",
    "pick_free_ports",
]
