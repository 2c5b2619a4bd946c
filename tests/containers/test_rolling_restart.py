"""A rolling restart of the gateways under load breaks nothing (issue 22). Two gateway
replicas behind HAProxy share Redis; official-SDK agent loops run over HTTP and over
WebSocket (one SDK connection each, reconnecting by itself on the close codes it takes as
recoverable), each its own tenant. Each gateway in turn is stopped as an orchestrator
stops it (SIGTERM; docker's own timeout past the gateway's drain), started again, and
seen healthy before the next one goes. The test asserts:

- zero failed turns: a stopping gateway is not ready for a while first
  (``TURNPIKE_SHUTDOWN_DELAY_S``: HAProxy moves new requests away), finishes what is in
  flight, and closes each socket with 1012 only between responses;
- every conversation continued: every turn chains the last (``previous_response_id``),
  from Redis on the other replica;
- nothing lost or billed twice: every completed response is in the store, and in the
  billing ledger exactly once, with its tokens.

``make test`` runs one round (each gateway restarted once); ``make rolling-restart``
(ROLLING_RESTART=full) three rounds under twice the clients, and writes the figures to
bench/results/rolling-restart.{md,json} (ROLLING_RESULTS). The short pass writes them next
to its log."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.chaos import AgentClient, Turn, ledger_mismatches, missing_from_store, running

REPO = Path(__file__).resolve().parents[2]
FULL = os.environ.get("ROLLING_RESTART", "short") == "full"
ROUNDS = 3 if FULL else 1
CLIENTS = 8 if FULL else 4  # half HTTP, half WebSocket
CLIENT_TIMEOUT_S = 30.0
GATEWAYS = ("gateway-1", "gateway-2")
# Past the gateway's own bound (shutdown delay + drain): docker never has to SIGKILL it.
STOP_TIMEOUT_S = 40
HEALTHY_WITHIN_S = 120.0
# After a replica is healthy, HAProxy's next check (every 2 s, up after 1) lets it in.
ADMITTED_AFTER_S = 3.0
# Load on both replicas before the first restart, and after the last.
STEADY_S = 5.0 if FULL else 3.0


@dataclass
class Restart:
    gateway: str
    round: int
    began: float
    stopped: float  # docker's stop returned: the process exited
    healthy: float  # compose's health check passed again
    admitted: float  # HAProxy can send to it again

    def record(self, turns: list[Turn], t0: float) -> dict[str, Any]:
        during = [t for t in turns if t.ended >= self.began and t.began <= self.admitted]
        return {
            "gateway": self.gateway,
            "round": self.round,
            "stop_s": round(self.stopped - self.began, 2),
            "healthy_after_s": round(self.healthy - self.stopped, 2),
            "at_s": round(self.began - t0, 2),
            "turns_during": len(during),
            "failed_during": sum(not t.ok for t in during),
            "p50_turn_ms_during": _p50(during),
            "max_turn_ms_during": round(max((t.seconds for t in during), default=0) * 1000, 1),
        }


def _p50(turns: list[Turn]) -> float | None:
    times = [t.seconds * 1000 for t in turns if t.ok]
    return round(statistics.median(times), 1) if times else None


def health_of(stack, service: str) -> str:
    states = [s for s in stack.compose.states() if s.service == service]
    return states[0].health if states and states[0].status == "running" else "down"


def restart(stack, gateway: str, number: int) -> Restart:
    container = stack.container(gateway)
    began = time.monotonic()
    container.stop(timeout=STOP_TIMEOUT_S)  # SIGTERM: not ready, drain, exit
    stopped = time.monotonic()
    container.start()
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while health_of(stack, gateway) != "healthy":
        assert time.monotonic() < deadline, f"{gateway} not healthy after {HEALTHY_WITHIN_S} s"
        time.sleep(0.25)
    healthy = time.monotonic()
    time.sleep(ADMITTED_AFTER_S)
    return Restart(gateway, number, began, stopped, healthy, time.monotonic())


def chained(client: AgentClient) -> list[str]:
    """Turns of ``client`` that did not continue its conversation from the turn before."""
    responses = [t for t in client.snapshot() if t.ok]
    return [
        turn.completed_id
        for before, turn in itertools.pairwise(responses)
        if turn.previous_id != before.completed_id
    ]


def results_path(tmp_path: Path) -> Path:
    if path := os.environ.get("ROLLING_RESULTS"):
        return Path(path) if Path(path).is_absolute() else REPO / path
    return tmp_path / "rolling-restart.md"


def report(data: dict[str, Any]) -> str:
    lines = [
        f"# Rolling restart ({data['mode']})",
        "",
        f"{data['clients']} official-SDK agent loops ({data['clients'] // 2} HTTP, "
        f"{data['clients'] // 2} WebSocket reconnecting by itself, a tenant each) through "
        "HAProxy to two gateway replicas sharing Redis; each gateway stopped (SIGTERM) and "
        f"started again in turn, {data['rounds']} round(s). Written by `make rolling-restart`.",
        "",
        f"- turns: {data['turns']}, completed {data['completed']}, failed {data['failed']}",
        f"- conversations continued: {data['clients'] - len(data['broken_chains'])} of "
        f"{data['clients']} (every turn chained from the one before)",
        f"- lost (not in the store, or not in the ledger exactly once): {len(data['lost'])}",
        f"- WebSocket reconnections by the SDK: {data['reconnects']}; creates sent again "
        f"after a close raced them (never sent before): {data['resent']}",
        f"- p50 turn: {data['p50_turn_ms_steady']} ms steady, "
        f"{data['p50_turn_ms_restarting']} ms while a gateway restarted",
        f"- HTTP turns by replica: {data['http_by_replica']}",
        "",
        "| round | gateway | stop (s) | healthy after (s) | turns during | failed | "
        "p50 turn (ms) | max turn (ms) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["restarts"]:
        lines.append(
            f"| {r['round']} | {r['gateway']} | {r['stop_s']} | {r['healthy_after_s']} | "
            f"{r['turns_during']} | {r['failed_during']} | {r['p50_turn_ms_during']} | "
            f"{r['max_turn_ms_during']} |"
        )
    return "\n".join(lines) + "\n"


@pytest.fixture
def clients(container_stack):
    started = [
        AgentClient(
            tenant,
            transport,
            container_stack.base_url,
            container_stack.keys[tenant],
            CLIENT_TIMEOUT_S,
            reconnect=True,
        )
        for n in range(1, CLIENTS + 1)
        for tenant, transport in [(f"roll-{n}", "http" if n % 2 else "websocket")]
    ]
    with running(started, CLIENT_TIMEOUT_S + 10):
        yield started


@pytest.mark.timeout(1800 if FULL else 600)
def test_a_rolling_restart_of_the_gateways_fails_no_turn(container_stack, clients, tmp_path):
    stack = container_stack
    t0 = time.monotonic()
    time.sleep(STEADY_S)
    restarts = []
    for number in range(1, ROUNDS + 1):
        for gateway in GATEWAYS:
            restarts.append(restart(stack, gateway, number))
    time.sleep(STEADY_S)
    for client in clients:
        client.stop(CLIENT_TIMEOUT_S + 10)

    turns = [t for c in clients for t in c.snapshot() if t.began >= t0]
    completed = [t for t in turns if t.ok]
    lost = set(missing_from_store(stack, completed)) | set(
        ledger_mismatches(stack, completed, "roll-")
    )
    broken = {c.name: ids for c in clients if (ids := chained(c))}
    restarting = [t for t in turns if any(r.began <= t.began <= r.admitted for r in restarts)]
    steady = [t for t in turns if t not in restarting]
    by_replica: dict[str, int] = {}
    for turn in completed:
        if turn.replica:
            by_replica[turn.replica] = by_replica.get(turn.replica, 0) + 1
    data = {
        "mode": "full" if FULL else "short",
        "clients": len(clients),
        "rounds": ROUNDS,
        "turns": len(turns),
        "completed": len(completed),
        "failed": len(turns) - len(completed),
        "errors": sorted({f"{t.transport}: {t.error}" for t in turns if not t.ok}),
        "broken_chains": broken,
        "lost": sorted(lost),
        "reconnects": sum(c.reconnects for c in clients),
        "resent": sum(c.resent for c in clients),
        "p50_turn_ms_steady": _p50(steady),
        "p50_turn_ms_restarting": _p50(restarting),
        "http_by_replica": dict(sorted(by_replica.items())),
        "restarts": [r.record(turns, t0) for r in restarts],
    }
    path = results_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report(data))
    path.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    print(f"\n{report(data)}\n(written to {path})")

    assert data["failed"] == 0, data["errors"]
    assert not broken, broken
    assert not lost, f"lost {len(lost)} of {len(completed)}: {sorted(lost)[:5]}"
    # The restarts met the load: both replicas served HTTP turns, and every WebSocket
    # client was moved by a drain (1012: each replica went once at least).
    assert set(by_replica) == set(GATEWAYS), by_replica
    assert data["reconnects"] >= CLIENTS // 2, data["reconnects"]
