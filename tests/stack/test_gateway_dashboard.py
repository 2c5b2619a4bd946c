"""The live dashboard's data: snapshots of the gateway's metrics (synthetic observations
on the metric objects of gateway/metrics.py), rates and windowed percentiles from their
differences, sampling only while someone looks, and the routes.

The metric objects live in the process's default registry, which other tests may also
record into: every figure checked here is a difference between two snapshots."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY

from turnpike.gateway import metrics
from turnpike.gateway.api import dashboard as dashboard_api
from turnpike.gateway.observability.dashboard.live import LiveDashboard
from turnpike.gateway.observability.dashboard.sampler import (
    Histogram,
    Sampler,
    histogram_quantile,
    take_snapshot,
)
from turnpike.gateway.observability.tracing import UNTRACED_PATHS

INF = math.inf


def snapshot(t: float):
    return take_snapshot(REGISTRY.collect(), t)


def turn(tenant: str, *, pipeline: str = "sprint", outcome: str = "completed") -> None:
    metrics.RESPONSES.labels("turnpike-sim", pipeline, "http", tenant, outcome).inc()


# -- histogram_quantile ---------------------------------------------------------------------


def test_quantile_interpolates_within_the_bucket_like_prometheus() -> None:
    buckets = [(0.1, 10.0), (0.5, 20.0), (1.0, 30.0), (INF, 30.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.985)
    assert histogram_quantile(1 / 3, buckets) == pytest.approx(0.1)  # the bound itself
    # Lowest bucket: from zero.
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.075)


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.5, [(0.1, 1.0), (1.0, 2.0), (INF, 10.0)]) == 1.0


def test_quantile_without_observations_is_none() -> None:
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None


def test_histogram_difference_and_counter_reset() -> None:
    later = Histogram({0.1: 5.0, INF: 8.0}, sum=2.0, count=8.0)
    earlier = Histogram({0.1: 1.0, INF: 2.0}, sum=0.5, count=2.0)
    window = later.minus(earlier)
    assert window.buckets == {0.1: 4.0, INF: 6.0}
    assert window.mean() == pytest.approx(0.25)
    # The process restarted: the counters began again, the later values are the window.
    assert earlier.minus(later) is earlier


# -- snapshots and the view -------------------------------------------------------------------


def test_turns_per_second_from_differences_between_snapshots() -> None:
    sampler = Sampler(interval_s=2.0, keep_s=60.0)
    sampler.add(snapshot(100.0))
    for _ in range(10):
        turn("alice")
    turn("bob", outcome="failed")
    sampler.add(snapshot(102.0))
    view = sampler.view()
    assert view["series"]["t"] == [-2.0, 0.0]
    assert view["series"]["turns_per_s"] == [None, pytest.approx(5.5)]
    assert view["now"]["turns_per_s"] == pytest.approx(5.5)
    assert view["now"]["errors_total"] >= 1


def test_the_ring_is_bounded_and_rates_use_a_trailing_window() -> None:
    sampler = Sampler(interval_s=2.0, keep_s=20.0)
    for step in range(30):
        turn("alice")
        sampler.add(snapshot(step * 2.0))
    view = sampler.view()
    assert len(view["series"]["t"]) == 11
    assert view["series"]["t"][0] == -20.0
    # One turn per 2 s, over the trailing 10 s window.
    assert view["series"]["turns_per_s"][-1] == pytest.approx(0.5)
    assert view["sampled_s"] == 20.0


def test_percentiles_come_from_the_window_only() -> None:
    sampler = Sampler(interval_s=2.0, keep_s=300.0)
    for _ in range(50):  # before the window: a slow past that must not count
        metrics.TIME_TO_FIRST_TOKEN.labels("chat", "turnpike-sim", "sprint", "http").observe(7.0)
    sampler.add(snapshot(0.0))
    for seconds in (0.03, 0.03, 0.03, 0.03, 0.3):
        metrics.TIME_TO_FIRST_TOKEN.labels("chat", "turnpike-sim", "sprint", "http").observe(
            seconds
        )
        metrics.API_OVERHEAD.labels("turnpike-sim", "connection", "websocket").observe(0.004)
    sampler.add(snapshot(2.0))
    series = sampler.view()["series"]
    # Five observations: four in (0.02, 0.04], one in (0.25, 0.5].
    assert series["ttft_ms"]["p50"][-1] == pytest.approx(20 + 20 * 2.5 / 4)
    assert series["ttft_ms"]["p99"][-1] == pytest.approx(250 + 250 * 0.95)
    assert 3.0 <= series["overhead_ms"]["p90"][-1] <= 5.0
    assert series["ttft_ms"]["p50"][0] is None  # nothing before the first snapshot


def test_stages_per_pipeline_in_pipeline_order_with_the_model_apart() -> None:
    sampler = Sampler()
    sampler.add(snapshot(0.0))
    for _ in range(4):
        metrics.STAGE_DURATION.labels("sprint", "route").observe(0.002)
        metrics.STAGE_DURATION.labels("sprint", "load_conversation").observe(0.001)
        metrics.STAGE_DURATION.labels("sprint", "safety").observe(0.003)
        metrics.STAGE_DURATION.labels("sprint", "generate").observe(0.5)
    metrics.STAGE_DURATION.labels("legacy", "render").observe(0.01)
    sampler.add(snapshot(2.0))
    order = dashboard_api.stage_order()
    view = sampler.view(order)
    pipelines = {p["pipeline"]: p for p in view["stages"]}
    assert list(pipelines) == ["legacy", "sprint"]  # the order of PIPELINES
    sprint = pipelines["sprint"]
    assert [s["stage"] for s in sprint["stages"]] == ["load_conversation", "safety", "route"]
    assert [s["mean_ms"] for s in sprint["stages"]] == [
        pytest.approx(1.0),
        pytest.approx(3.0),
        pytest.approx(2.0),
    ]
    # Safety runs beside render and resolve_images, in the step after resolve_model.
    assert [s["step"] for s in sprint["stages"]] == [0, 3, 4]
    assert sprint["model"] == [{"stage": "generate", "mean_ms": pytest.approx(500.0)}]
    assert sprint["turns"] == 4


def test_cache_hit_ratios_recent_and_since_the_start() -> None:
    sampler = Sampler()
    sampler.add(snapshot(0.0))
    for result in ("hit", "hit", "hit", "miss"):
        metrics.CACHE_LOOKUPS.labels("token", result).inc()
    sampler.add(snapshot(2.0))
    caches = {c["cache"]: c for c in sampler.view()["caches"]}
    assert caches["token"]["recent"] == {"hits": 3, "lookups": 4, "ratio": 0.75}
    assert caches["token"]["total"]["lookups"] >= 4


def test_gauges_are_shown_as_they_are() -> None:
    metrics.WEBSOCKET_CONNECTIONS.inc(3)
    metrics.ACTIVE_RESPONSES.labels("websocket").inc(2)
    try:
        before = Sampler()
        before.add(snapshot(0.0))
        now = before.view()["now"]
    finally:
        metrics.WEBSOCKET_CONNECTIONS.dec(3)
        metrics.ACTIVE_RESPONSES.labels("websocket").dec(2)
    after = Sampler()
    after.add(snapshot(0.0))
    assert now["websocket_connections"] - after.view()["now"]["websocket_connections"] == 3
    assert now["active_responses"] - after.view()["now"]["active_responses"] == 2


def test_no_tenant_reaches_the_view() -> None:
    tenants = ("tenant-zebra-7", "tenant-okapi-9")
    sampler = Sampler()
    sampler.add(snapshot(0.0))
    for tenant in tenants:
        turn(tenant)
        metrics.TOKENS.labels("turnpike-sim", "sprint", tenant, "output").inc(40)
    sampler.add(snapshot(2.0))
    text = json.dumps(sampler.view(dashboard_api.stage_order()))
    assert not any(tenant in text for tenant in tenants)
    assert "tenant" not in text


MULTIPROCESS_TURN = """
import json
from turnpike.gateway import metrics
from turnpike.gateway.observability.dashboard.sampler import Sampler, take_snapshot
from turnpike.metrics import multiprocess_registry

sampler = Sampler()
sampler.add(take_snapshot(multiprocess_registry().collect(), 0.0))
metrics.RESPONSES.labels("turnpike-sim", "sprint", "http", "alice", "completed").inc(4)
metrics.TIME_TO_FIRST_TOKEN.labels("chat", "turnpike-sim", "sprint", "http").observe(0.03)
metrics.STAGE_DURATION.labels("sprint", "route").observe(0.002)
metrics.WEBSOCKET_CONNECTIONS.inc()
sampler.add(take_snapshot(multiprocess_registry().collect(), 2.0))
print(json.dumps(sampler.view()))
"""


def test_a_snapshot_of_the_sum_over_gateway_processes(tmp_path) -> None:
    """Several gateway processes: the registry read is prometheus-client's multiprocess
    sum, with the same sample names."""
    done = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_TURN],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["now"]["turns_total"] == 4 and view["now"]["turns_per_s"] == 2.0
    assert view["now"]["websocket_connections"] == 1
    assert 20 <= view["series"]["ttft_ms"]["p50"][-1] <= 40
    assert view["stages"][0]["stages"][0]["mean_ms"] == pytest.approx(2.0)


def test_an_empty_ring_says_so() -> None:
    assert Sampler().view()["empty"] is True


# -- sampling only while someone looks --------------------------------------------------------


class Readiness:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        return True, {"services": {"safety": True, "router": False}, "store": True}


async def test_sampling_starts_on_a_request_and_stops_when_nobody_looks() -> None:
    collects = 0

    def collect():
        nonlocal collects
        collects += 1
        return REGISTRY.collect()

    live = LiveDashboard(collect, Readiness(), interval_s=0.05, idle_s=0.3)
    await asyncio.sleep(0.2)
    assert collects == 0 and not live.sampling  # nothing until someone looks
    data = await live.data()
    # The request's own sample shows the totals at once (the sampling loop it started may
    # have ticked too, on a machine slow to come back from the readiness call).
    assert data["empty"] is False and collects >= 1
    await asyncio.sleep(0.2)
    assert live.sampling and collects >= 3
    await asyncio.sleep(0.4)
    assert not live.sampling  # idle: stopped, and the ring forgotten
    assert not live.sampler.ring
    stopped_at = collects
    await asyncio.sleep(0.2)
    assert collects == stopped_at
    await live.close()


async def test_backend_health_is_cached() -> None:
    readiness = Readiness()
    now = [0.0]  # the cache's clock: a busy machine cannot age it between two calls
    live = LiveDashboard(REGISTRY.collect, readiness, health_ttl_s=0.2, clock=lambda: now[0])
    try:
        first = await asyncio.gather(*(live.data() for _ in range(5)))
        assert readiness.calls == 1
        assert first[0]["health"] == {
            "ready": True,
            "services": {"safety": True, "router": False},
            "store": True,
        }
        now[0] = 0.25
        await live.data()
        assert readiness.calls == 2
    finally:
        await live.close()


# -- the routes -----------------------------------------------------------------------------


class FakeGateway:
    readiness = Readiness()


@pytest.fixture
async def client():
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.gateway = FakeGateway()
        yield

    app = FastAPI(lifespan=lifespan)
    app.include_router(dashboard_api.router)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
            yield http


async def test_the_page_reaches_nothing_outside_the_gateway(client: httpx.AsyncClient) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<title>Turnpike dashboard</title>" in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    # The one URL in the page is SVG's namespace, an identifier never fetched.
    urls = set(re.findall(r"""(?:https?:)?//[\w.-]+[^\s"'`)]*""", page.text))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"""\b(?:src|href)=["'](?!data:)""", page.text)


async def test_the_data_route(client: httpx.AsyncClient) -> None:
    data = (await client.get("/dashboard/data")).json()
    assert data["health"]["services"] == {"safety": True, "router": False}
    assert {"turns_total", "turns_per_s", "websocket_connections", "active_responses"} <= set(
        data["now"]
    )
    assert data["series"]["ttft_ms"].keys() == {"p50", "p90", "p99"}


def test_the_dashboard_is_not_traced() -> None:
    assert {"/dashboard", "/dashboard/data"} <= UNTRACED_PATHS
