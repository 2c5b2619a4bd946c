"""Ports for a stack's servers, picked free just before its processes bind them.

They are picked below the kernel's ephemeral range. The kernel takes the source port of
every outgoing connection from that range, so a port picked free there can be taken by a
client's connection before its server binds it, a race that a busy test run loses now and
then. Below it, a port is taken only by another server. Each process walks the range from
a start of its own, so two processes picking at once (two pytest-xdist workers) do not
pick the same ports.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

from turnpike.catalogue import LOOPBACK

# Below the range, clear of the well-known ports and of ``make run``'s defaults (8080,
# 91xx, 50051 and up, which lie inside the usual ephemeral range itself).
LOWEST = 20_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_DEFAULT = 32_768  # Linux's default lower bound, where /proc cannot say


def ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_DEFAULT


def _walk() -> Iterator[int]:
    """Every port of the range once per lap, from a start of this process's own."""
    high = ephemeral_low()
    if high - LOWEST < 1_000:  # a kernel configured with a low range: ask the kernel
        while True:
            yield 0
    ports = range(LOWEST, high)
    start = random.Random(os.getpid()).randrange(len(ports))
    yield from itertools.cycle([*ports[start:], *ports[:start]])


_PORTS = _walk()


def _bindable(host: str, port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        return sock
    except OSError:
        sock.close()
        return None


def pick_free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports free right now on ``host`` (held open together while
    picked, so none is handed out twice)."""
    held: list[socket.socket] = []
    try:
        for port in _PORTS:
            if len(held) == count:
                break
            if sock := _bindable(host, port):
                held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()
