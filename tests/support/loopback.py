"""A container's port published on the loopback address only, not on every interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # testcontainers is imported by the container tests only
    from testcontainers.core.container import DockerContainer


def publish_on_loopback(container: DockerContainer, container_port: str, host_port: int) -> None:
    """Publish ``container_port`` (e.g. "6379/tcp") on 127.0.0.1:``host_port``, in docker's
    (address, port) form: ``with_bind_ports`` takes no address. testcontainers hands its
    port map to docker as it is, though it types the values as ports alone."""
    container.ports[container_port] = ("127.0.0.1", host_port)  # type: ignore[assignment]
