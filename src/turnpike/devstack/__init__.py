"""The whole Turnpike stack as local processes on loopback (``make run``, test fixtures).

``python -m turnpike.devstack`` runs it in the foreground. The library behind it, by job:
``layout`` (which processes, where: ``StackConfig``), ``ports`` (free ports to put them on), ``environment`` (each process's
variables, and where clients reach the stack) and ``supervisor`` (``LocalStack``:
start, watch and stop the processes).
"""

from turnpike.devstack.environment import StackEndpoints, build_env
from turnpike.devstack.layout import ServiceSpec, StackConfig, default_services
from turnpike.devstack.ports import pick_free_ports
from turnpike.devstack.supervisor import LocalStack, StackError

__all__ = [
    "LocalStack",
    "ServiceSpec",
    "StackConfig",
    "StackEndpoints",
    "StackError",
    "build_env",
    "default_services",
    "pick_free_ports",
]
