from __future__ import annotations

import pytest
from support.metric_samples import Delta, sample

from turnpike.router.routing import NoHealthyWorkerError, Worker, WorkerRouter, parse_workers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_router(n: int = 3, *, capacity: int = 100, window: float = 10.0, clock=None):
    workers = [Worker(f"w{i}", f"127.0.0.1:{6000 + i}") for i in range(1, n + 1)]
    router = WorkerRouter(
        workers, affinity_capacity=capacity, load_window_s=window, clock=clock or Clock()
    )
    for w in workers:
        router.set_health(w.id, True)
    return router


def test_parse_workers() -> None:
    workers = parse_workers(["a=127.0.0.1:1", " b = host:2 "])
    assert [(w.id, w.address, w.healthy) for w in workers] == [
        ("a", "127.0.0.1:1", False),
        ("b", "host:2", False),
    ]
    for bad in (["a"], ["a=host"], ["=h:1"], ["a=h:x"], ["a=h:1", "a=h:2"], []):
        with pytest.raises(ValueError):
            parse_workers(bad)


def test_affinity_sticks_to_the_same_worker() -> None:
    router = make_router()
    first = router.route("conv-1", 100)
    assert not first.affinity_hit
    for _ in range(5):
        router.route("other", 100)  # load elsewhere must not move conv-1
    again = router.route("conv-1", 5000)
    assert again.affinity_hit
    assert again.worker_id == first.worker_id
    assert again.worker_address == f"127.0.0.1:{6000 + int(first.worker_id[1])}"


def test_new_conversations_spread_over_workers() -> None:
    router = make_router(3)
    chosen = [router.route(f"c{i}", 0).worker_id for i in range(6)]
    assert sorted(chosen) == ["w1", "w1", "w2", "w2", "w3", "w3"]
    assert all(router.load(w) == 1.0 * 2 for w in ("w1", "w2", "w3"))


def test_least_loaded_worker_wins_weighted_by_prompt_tokens() -> None:
    router = make_router(2)
    big = router.route("big", 10 * 1024)  # weight 11
    small = [router.route(f"s{i}", 0) for i in range(5)]
    assert all(d.worker_id != big.worker_id for d in small)
    assert router.load(big.worker_id) == pytest.approx(11.0)


def test_load_expires_after_window() -> None:
    clock = Clock()
    router = make_router(2, window=10.0, clock=clock)
    heavy = router.route("heavy", 100 * 1024).worker_id
    assert router.load(heavy) > 100
    clock.now += 10.5
    assert router.load(heavy) == 0.0


def test_exclude_avoids_worker_and_moves_affinity() -> None:
    router = make_router(2)
    first = router.route("conv", 0).worker_id
    moved = router.route("conv", 0, exclude=[first])
    assert moved.worker_id != first and not moved.affinity_hit
    # The conversation now lives on the new worker.
    assert router.route("conv", 0).worker_id == moved.worker_id
    assert router.route("conv", 0).affinity_hit


def test_failover_when_worker_marked_down() -> None:
    router = make_router(2)
    convs = [f"c{i}" for i in range(4)]
    before = {c: router.route(c, 0).worker_id for c in convs}
    victim = "w1"
    assert victim in before.values()
    router.set_health(victim, False)
    after = {c: router.route(c, 0) for c in convs}
    for conv, decision in after.items():
        assert decision.worker_id == "w2"
        assert decision.affinity_hit == (before[conv] == "w2")
    # Back up: conversations stay where their cache now is; new ones may use w1.
    router.set_health(victim, True)
    assert all(router.route(c, 0).worker_id == "w2" for c in convs)
    assert router.route("fresh", 0).worker_id == "w1"


def test_no_healthy_worker() -> None:
    router = make_router(2)
    router.set_health("w1", False)
    with pytest.raises(NoHealthyWorkerError):
        router.route("c", 0, exclude=["w2"])
    router.set_health("w2", False)
    assert not router.any_healthy()
    with pytest.raises(NoHealthyWorkerError):
        router.route("c", 0)


def test_unknown_health_means_no_traffic() -> None:
    router = WorkerRouter([Worker("w1", "h:1")])
    with pytest.raises(NoHealthyWorkerError):
        router.route("", 0)


def test_affinity_map_is_bounded_lru() -> None:
    router = make_router(2, capacity=3)
    for key in ("a", "b", "c"):
        router.route(key, 0)
    router.route("a", 0)  # refresh a: b is now the oldest
    router.route("d", 0)
    assert router.affinity_of("b") is None
    assert all(router.affinity_of(k) is not None for k in ("a", "c", "d"))


def test_empty_affinity_key_is_not_remembered() -> None:
    router = make_router(2)
    decisions = [router.route("", 0) for _ in range(4)]
    assert not any(d.affinity_hit for d in decisions)
    assert {d.worker_id for d in decisions} == {"w1", "w2"}
    assert router.affinity_of("") is None


def test_decisions_and_worker_health_are_counted() -> None:
    decisions = "turnpike_router_decisions_total"
    hits, fresh = (
        Delta(decisions, decision="affinity_hit"),
        Delta(decisions, decision="least_loaded"),
    )
    failovers = Delta(decisions, decision="failover")

    def workers(state: str) -> float:
        return sample("turnpike_router_workers", state=state)

    router = WorkerRouter([Worker(f"w{i}", f"h:{i}") for i in (1, 2, 3)])
    assert (workers("healthy"), workers("unhealthy")) == (0, 3)  # none checked yet
    for worker_id in ("w1", "w2", "w3"):
        router.set_health(worker_id, True)
    assert (workers("healthy"), workers("unhealthy")) == (3, 0)

    home = router.route("conv", 0).worker_id
    router.route("conv", 0)
    router.route("", 0)
    assert (hits.change, fresh.change, failovers.change) == (1, 2, 0)
    # Off a worker that went down, and around one the caller excludes: failovers.
    router.set_health(home, False)
    assert (workers("healthy"), workers("unhealthy")) == (2, 1)
    moved = router.route("conv", 0).worker_id
    router.route("other", 0, exclude=[moved])
    assert (hits.change, fresh.change, failovers.change) == (1, 2, 2)
    with pytest.raises(NoHealthyWorkerError):
        router.route("conv", 0, exclude=["w1", "w2", "w3"])
    assert failovers.change == 2  # no worker, no decision
