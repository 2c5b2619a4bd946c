"""Worker choice: conversation affinity first, then the least loaded healthy worker.

Pure logic (no I/O, injectable clock); the health poller flips ``healthy`` flags and
the gRPC servicer calls :meth:`WorkerRouter.route`. Each decision and each change of
health is counted (``turnpike.router.metrics``).

- Affinity: a conversation's key maps to the worker that served it, so follow-ups
  land where its prompt prefix is in the KV cache. The map is a bounded LRU. When
  that worker is down or excluded by the caller, the next route picks another
  worker and the conversation's affinity moves there (its cache is rebuilt there).
- Load: the routes a worker was given in the last ``load_window_s`` seconds, each
  weighted ``1 + prompt_tokens / 1024`` (one unit for the generation, one more per
  1024 prompt tokens it may have to prefill). It is an estimate the router can
  make alone, without asking workers; ties go round-robin so equal workers share
  new conversations evenly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from turnpike.lru import LruCache
from turnpike.router import metrics

PROMPT_TOKENS_PER_LOAD_UNIT = 1024


class NoHealthyWorkerError(RuntimeError):
    """Every worker is down or excluded."""


@dataclass
class Worker:
    id: str
    address: str  # host:port of its Inference service
    # Unknown until the first health check; only workers seen SERVING get traffic.
    healthy: bool = False


@dataclass(frozen=True)
class Decision:
    worker_id: str
    worker_address: str
    affinity_hit: bool


def parse_workers(specs: Iterable[str]) -> list[Worker]:
    """Parse ``id=host:port`` specs; ids must be unique."""
    workers: list[Worker] = []
    for spec in specs:
        worker_id, sep, address = (part.strip() for part in spec.partition("="))
        host, colon, port = address.rpartition(":")
        if not sep or not worker_id or not colon or not host or not port.isdigit():
            raise ValueError(f"worker spec {spec!r} is not 'id=host:port'")
        if any(w.id == worker_id for w in workers):
            raise ValueError(f"worker id {worker_id!r} appears twice")
        workers.append(Worker(worker_id, address))
    if not workers:
        raise ValueError("no workers configured")
    return workers


def route_weight(prompt_tokens: int) -> float:
    return 1.0 + max(prompt_tokens, 0) / PROMPT_TOKENS_PER_LOAD_UNIT


class WorkerRouter:
    def __init__(
        self,
        workers: list[Worker],
        *,
        affinity_capacity: int = 100_000,
        load_window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if affinity_capacity < 1 or load_window_s <= 0:
            raise ValueError("affinity_capacity must be >= 1 and load_window_s > 0")
        self._workers = {w.id: w for w in workers}
        self._order = [w.id for w in workers]
        self._affinity: LruCache[str, str] = LruCache(affinity_capacity)
        self._window = load_window_s
        self._clock = clock
        self._recent: deque[tuple[float, str, float]] = deque()  # (time, worker, weight)
        self._load = dict.fromkeys(self._order, 0.0)
        self._routes = dict.fromkeys(self._order, 0)  # entries in _recent per worker
        self._next = 0  # round-robin start for ties
        self._publish_health()

    @property
    def workers(self) -> list[Worker]:
        return [self._workers[i] for i in self._order]

    def set_health(self, worker_id: str, healthy: bool) -> bool:
        """Record a health result; returns True when the state changed."""
        worker = self._workers[worker_id]
        changed = worker.healthy != healthy
        worker.healthy = healthy
        if changed:
            self._publish_health()
        return changed

    def _publish_health(self) -> None:
        healthy = sum(w.healthy for w in self._workers.values())
        metrics.publish_health(healthy, len(self._workers))

    def any_healthy(self) -> bool:
        return any(w.healthy for w in self._workers.values())

    def load(self, worker_id: str) -> float:
        self._expire()
        return self._load[worker_id]

    def affinity_of(self, key: str) -> str | None:
        return self._affinity.peek(key)

    def route(
        self, affinity_key: str = "", prompt_tokens: int = 0, exclude: Iterable[str] = ()
    ) -> Decision:
        self._expire()  # once per decision: the window also stays bounded under affinity
        excluded = set(exclude)
        remembered = self._affinity.peek(affinity_key) if affinity_key else None
        if remembered is not None:
            worker = self._workers[remembered]
            if worker.healthy and worker.id not in excluded:
                self._affinity.get(affinity_key)  # used: now the most recent
                self._record(worker.id, prompt_tokens)
                metrics.AFFINITY_HIT.inc()
                return Decision(worker.id, worker.address, affinity_hit=True)
        worker = self._least_loaded(excluded)
        if affinity_key:
            self._affinity.put(affinity_key, worker.id)
        self._record(worker.id, prompt_tokens)
        # Moved off the conversation's worker, or around one the caller saw fail.
        failover = remembered is not None or bool(excluded)
        (metrics.FAILOVER if failover else metrics.LEAST_LOADED).inc()
        return Decision(worker.id, worker.address, affinity_hit=False)

    def _least_loaded(self, excluded: set[str]) -> Worker:
        count = len(self._order)
        rotated = [self._order[(self._next + i) % count] for i in range(count)]
        candidates = [i for i in rotated if self._workers[i].healthy and i not in excluded]
        if not candidates:
            raise NoHealthyWorkerError("no healthy worker")
        chosen = min(candidates, key=lambda i: self._load[i])  # first minimum: round-robin
        self._next = (self._order.index(chosen) + 1) % count
        return self._workers[chosen]

    def _record(self, worker_id: str, prompt_tokens: int) -> None:
        weight = route_weight(prompt_tokens)
        self._recent.append((self._clock(), worker_id, weight))
        self._load[worker_id] += weight
        self._routes[worker_id] += 1

    def _expire(self) -> None:
        horizon = self._clock() - self._window
        while self._recent and self._recent[0][0] <= horizon:
            _, worker_id, weight = self._recent.popleft()
            self._routes[worker_id] -= 1
            # Reset to exactly 0 when idle, so float dust cannot break round-robin ties.
            self._load[worker_id] = (
                self._load[worker_id] - weight if self._routes[worker_id] else 0.0
            )
