"""Starting a private local stack despite a port race: its ports are picked free, then
bound by its processes a moment later, and another process (a test's own gateway, a
container's published port, another xdist worker's stack) may take one in between. A
stack that lost that race is started again on new ports."""

from __future__ import annotations

from collections.abc import Callable

from turnpike.devstack import LocalStack, StackConfig, StackError

# What a process that lost the race logs (EADDRINUSE), in the error's log lines.
PORT_TAKEN = "Address already in use"
START_ATTEMPTS = 3


def start_private_stack(
    config: Callable[[], StackConfig], attempts: int = START_ATTEMPTS
) -> LocalStack:
    """A started stack on ``config()``'s layout; a new layout (a new call) after a port
    was taken, ``attempts`` in all. Any other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        local = LocalStack(config())
        try:
            local.start()
            return local
        except StackError as exc:
            local.stop()
            if PORT_TAKEN not in str(exc) or attempt == attempts:
                raise
    raise AssertionError("unreachable")
