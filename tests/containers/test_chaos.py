"""Chaos in the container stack: under a steady agent-loop load (official SDK clients over
HTTP and WebSocket, each its own tenant, through HAProxy, with the Redis profile), one
container at a time is stopped and started again, or cut off the network for a while and
reconnected. For each fault the test records which turns failed and with what error, how
long until every client completed a turn again, and asserts:

- nothing hangs: every turn ends within the client's timeout (and a little);
- every client recovers and goes on with its conversation (``previous_response_id``; on the
  other gateway replica when its own is gone, from Redis);
- no completed response is missing from the store (GET) or from the billing ledger, where
  each is recorded exactly once with the response's tokens.

``make test`` runs a short pass (a gateway replica and a worker); ``make chaos``
(TURNPIKE_CHAOS=full) stops every container and partitions a few, and writes the table to
bench/results/chaos.md (CHAOS_RESULTS). The short pass writes it next to its log."""

from __future__ import annotations

import os
import time
from pathlib import Path

import openai
import pytest
from openai import OpenAI
from support.chaos import (
    AgentClient,
    FaultResult,
    Turn,
    ledger_mismatches,
    missing_from_store,
    running,
    table,
)

REPO = Path(__file__).resolve().parents[2]
FULL = os.environ.get("TURNPIKE_CHAOS", "short") == "full"
CLIENT_TIMEOUT_S = 20.0
# A stopped container stays down this long; a partition lasts longer than a client's
# timeout, so that the timeouts fire.
DOWN_S = 5.0
PARTITION_S = CLIENT_TIMEOUT_S + 5
# Every wait is bounded: a container healthy again, every client past the fault.
HEALTHY_WITHIN_S = 120.0
RECOVERED_WITHIN_S = 90.0
HANG_MARGIN_S = 10.0
TENANTS = [f"chaos-{n}" for n in range(1, 5)]
GATEWAYS = ("gateway-1", "gateway-2")

SHORT_PASS = [("stop", "gateway-1"), ("stop", "worker-1")]
FULL_PASS = [
    *(
        ("stop", service)
        for service in (
            "gateway-1",
            "gateway-2",
            "safety",
            "tokenizer",
            "router",
            "worker-1",
            "worker-2",
            "billing",
            "imageres",
            "redis",
            "haproxy",
        )
    ),
    *(("partition", service) for service in ("gateway-2", "worker-2", "tokenizer", "redis")),
]

# -- the stack, seen from the test ------------------------------------------------------------


def health_of(stack, service: str) -> str:
    states = [s for s in stack.compose.states() if s.service == service]
    return states[0].health if states and states[0].status == "running" else "down"


def wait_until_healthy(stack, services) -> None:
    """Unlike compose's own wait, an unhealthy moment (a partition's aftermath) is not a
    failure: only the deadline is."""
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while unhealthy := [s for s in services if health_of(stack, s) != "healthy"]:
        assert time.monotonic() < deadline, f"not healthy after {HEALTHY_WITHIN_S} s: {unhealthy}"
        time.sleep(0.5)


def network_of(stack):
    from testcontainers.core.docker_client import DockerClient

    client = DockerClient().client
    [network] = [
        n
        for n in client.networks.list(names=[f"{stack.compose.project}_turnpike"])
        if n.name == f"{stack.compose.project}_turnpike"
    ]
    return network


def inject(stack, clients: list[AgentClient], kind: str, service: str) -> FaultResult:
    container = stack.container(service)
    began = time.monotonic()
    if kind == "stop":
        container.stop(timeout=10)  # SIGTERM, drain, exit (SIGKILL after 10 s)
        down = time.monotonic()
        time.sleep(DOWN_S)
        container.start()
    else:
        network = network_of(stack)
        network.disconnect(container)
        down = time.monotonic()
        time.sleep(PARTITION_S)
        network.connect(container, aliases=[service])  # its name again in Docker's DNS
    healed = time.monotonic()
    wait_until_healthy(stack, [service])
    # Every client completes a turn that began after the heal (the test asserts it once the
    # table is written, so that a failure still leaves the whole record).
    deadline = time.monotonic() + RECOVERED_WITHIN_S
    while (
        behind := [
            c.name for c in clients if not any(t.ok and t.began >= healed for t in c.snapshot())
        ]
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    settled = time.monotonic()
    turns = [t for c in clients for t in c.snapshot() if t.ended >= began and t.began <= settled]
    return FaultResult(f"{kind} {service}", began, down, healed, settled, turns, behind=behind)


# -- the test ------------------------------------------------------------------------------------


@pytest.fixture
def clients(container_stack):
    """Two HTTP and two WebSocket agent loops, each its own tenant, already past warm-up."""
    started = [
        AgentClient(tenant, transport, container_stack.base_url, key, CLIENT_TIMEOUT_S)
        for tenant, transport in zip(
            TENANTS, ("http", "websocket", "http", "websocket"), strict=True
        )
        for key in [container_stack.keys[tenant]]
    ]
    with running(started, CLIENT_TIMEOUT_S + HANG_MARGIN_S):
        yield started


def replicas_before(turns: list[Turn], moment: float) -> dict[str, str]:
    """Each HTTP client's replica on its last completed turn before ``moment``."""
    last: dict[str, str] = {}
    for turn in sorted(turns, key=lambda t: t.ended):
        if turn.ok and turn.replica and turn.ended < moment:
            last[turn.client] = turn.replica
    return last


def check_a_gateway_fault(result: FaultResult, turns: list[Turn], victim: str) -> None:
    """While a replica was down (its drain over) nothing was served by it, and the HTTP
    clients it served went on with their conversations on the other one
    (previous_response_id, from Redis)."""
    other = next(g for g in GATEWAYS if g != victim)
    during = [t for t in result.turns if t.ok and result.down < t.began < result.healed]
    assert not any(t.replica == victim for t in during), f"{victim} answered while stopped"
    for client, replica in replicas_before(turns, result.began).items():
        if replica == victim:
            moved = [t for t in during if t.client == client]
            assert moved and all(t.replica == other for t in moved), (client, moved[:3])


def results_path(tmp_path: Path) -> Path:
    if path := os.environ.get("CHAOS_RESULTS"):
        return Path(path) if Path(path).is_absolute() else REPO / path
    return tmp_path / "chaos.md"


@pytest.mark.timeout(3600 if FULL else 900)
def test_chaos_one_container_at_a_time(container_stack, clients, tmp_path):
    stack = container_stack
    every_service = [s.service for s in stack.compose.states()]
    faults = FULL_PASS if FULL else SHORT_PASS
    results = []
    for kind, service in faults:
        results.append(inject(stack, clients, kind, service))
        wait_until_healthy(stack, every_service)
    for client in clients:
        client.stop(CLIENT_TIMEOUT_S + HANG_MARGIN_S)

    turns = [t for c in clients for t in c.snapshot()]
    completed = [t for t in turns if t.ok]
    lost = set(missing_from_store(stack, completed)) | set(
        ledger_mismatches(stack, completed, "chaos-")
    )
    for result in results:
        result.lost = [t.response_id for t in result.turns if t.response_id in lost]

    served = replicas_before(turns, results[0].began)
    report = table(results)
    path = results_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"Chaos pass ({'full' if FULL else 'short'}): {len(clients)} SDK clients "
        f"(2 HTTP, 2 WebSocket, a tenant each) through HAProxy, Redis profile; "
        f"{len(turns)} turns, {len(completed)} completed. HTTP clients' replicas before the "
        f"first fault (HAProxy hashes the key): {served}.\n\n{report}"
    )
    print(f"\n{report}\n(written to {path})")

    # Every client recovered from every fault.
    stuck = {r.fault: r.behind for r in results if r.behind}
    assert not stuck, f"clients that did not recover within {RECOVERED_WITHIN_S} s: {stuck}"
    # Every failure was a clear one: a 503 or 504 the client may retry, a connection error
    # or its own timeout; never a 500.
    unclear = [f"{r.fault}: {e}" for r in results for e in r.errors() if " 500 " in f" {e} "]
    assert not unclear, unclear
    # Nothing hung: every turn ended within the client's bound.
    longest = max(turns, key=lambda t: t.seconds)
    assert longest.seconds <= CLIENT_TIMEOUT_S + HANG_MARGIN_S, longest
    # Nothing completed was lost, and nothing was billed twice or wrongly.
    assert not lost, f"lost {len(lost)} of {len(completed)}: {sorted(lost)[:5]}"
    for result in results:
        if result.fault.startswith("stop gateway-"):
            check_a_gateway_fault(result, turns, result.fault.split()[1])


def test_redis_down_fails_fast_and_clearly_and_loses_nothing(container_stack):
    """With the Redis profile, Redis is the response store: while it is down, what needs
    no stored response still works (a stateless turn with ``store: false``, the models),
    and what does fails within the store's bounds (a connect timeout of 2 s, a socket
    timeout of 5 s), clearly: a 503 before the response exists, a failed response
    (``service_unavailable``) after. Back again, it still holds every
    response stored before (its append-only file)."""
    stack = container_stack
    redis = stack.container("redis")
    with OpenAI(
        base_url=stack.base_url, api_key=stack.keys["chaos-1"], max_retries=0, timeout=30
    ) as sdk:
        before = sdk.responses.create(model="turnpike-sim-4000", input="remember this")
        redis.stop(timeout=10)
        try:
            began = time.monotonic()
            stateless = sdk.responses.create(
                model="turnpike-sim-4000", input="no state needed", store=False
            )
            assert stateless.status == "completed"
            assert {m.id for m in sdk.models.list()} >= {"turnpike-sim-4000"}
            # A response the store cannot keep ends failed, saying why (never completed).
            unsaved = sdk.responses.create(model="turnpike-sim-4000", input="store me")
            assert unsaved.status == "failed" and unsaved.error is not None
            assert unsaved.error.code == "service_unavailable", unsaved.error
            for attempt in (
                lambda: sdk.responses.create(
                    model="turnpike-sim-4000", previous_response_id=before.id, input="go on"
                ),
                lambda: sdk.responses.retrieve(before.id),
            ):
                with pytest.raises(openai.APIStatusError) as refused:
                    attempt()
                assert refused.value.status_code == 503, refused.value
                assert refused.value.body["code"] == "service_unavailable", refused.value.body
                assert "store" in refused.value.body["message"]
            assert time.monotonic() - began < 30, "the failures were not fast"
        finally:
            redis.start()
        wait_until_healthy(stack, ["redis"])
        # The store is back, with what it held: the conversation goes on.
        deadline = time.monotonic() + 30
        while True:
            try:
                after = sdk.responses.create(
                    model="turnpike-sim-4000", previous_response_id=before.id, input="still here?"
                )
                break
            except openai.APIStatusError as err:
                assert time.monotonic() < deadline, f"the store did not come back: {err}"
                time.sleep(0.5)
        assert after.status == "completed" and after.previous_response_id == before.id
