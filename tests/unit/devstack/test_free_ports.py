"""Ports for a stack are picked below the ephemeral range, where an outgoing connection's
source port cannot take one between its pick and its server's bind (the cause of a
service test's "did not become healthy" in a busy `make test`)."""

from __future__ import annotations

import socket

from turnpike.devstack import ports
from turnpike.devstack.ports import pick_free_ports


def test_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() -> None:
    picked = pick_free_ports(40) + pick_free_ports(40)
    assert len(set(picked)) == 80
    assert all(ports.LOWEST <= port < ports.ephemeral_low() for port in picked)


def test_a_port_some_server_holds_is_skipped() -> None:
    probe = pick_free_ports(1)[0]
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", probe + 1))
        holder.listen()
        # The walk goes on from the probe: its next port is held, so it is passed over.
        nxt = pick_free_ports(1)[0]
        assert nxt != probe + 1
    finally:
        holder.close()


def test_the_walk_falls_back_on_the_kernel_when_the_range_is_too_small(monkeypatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_low", lambda: ports.LOWEST + 10)
    walk = ports._walk()
    assert [next(walk) for _ in range(3)] == [0, 0, 0]
