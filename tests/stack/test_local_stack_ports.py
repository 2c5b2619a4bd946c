"""The session stack survives losing a port to another process between picking it free
and binding it (found by `make test`: one xdist worker's 185 stack tests failed on a
worker's EADDRINUSE)."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from support.local_stack import start_private_stack

from turnpike.devstack import StackConfig

pytestmark = pytest.mark.stack


def test_a_stack_whose_port_was_taken_starts_again_on_new_ports(tmp_path) -> None:
    thief = socket.socket()
    thief.bind(("127.0.0.1", 0))
    thief.listen()
    taken = thief.getsockname()[1]
    layouts: list[StackConfig] = []

    def layout() -> StackConfig:
        config = StackConfig.private(tmp_path / f"state-{len(layouts)}")
        if not layouts:  # the first layout loses its router port to the thief
            config = dataclasses.replace(
                config, service_ports={**config.service_ports, "router": taken}
            )
        layouts.append(config)
        return config

    try:
        local = start_private_stack(layout)
        try:
            assert len(layouts) == 2
            assert local.config.service_ports["router"] != taken
        finally:
            local.stop()
    finally:
        thief.close()
