"""Prometheus in the container stack: after real traffic through the gateway (the official
SDK over HTTP, SSE and WebSocket, and the legacy pipeline), the stack's own Prometheus
has scraped every service and answers, over its HTTP API, with the gateway's histograms
(time to first token, API overhead, stage durations), the billing counter and the
recording rules of deploy/prometheus/rules.yml.

The traffic uses a tenant of its own (``metrics``), so the counters labelled by tenant
are exact whatever else the session sent; the histograms carry no tenant and are checked
as at least this traffic. Every check polls for at most a few scrape intervals."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openai import OpenAI
from support.tools import WEATHER_TOOL, only_call, tool_result

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
SCRAPE_S = float(CONFIG["global"]["scrape_interval"].rstrip("s"))
# The first scrape after the traffic, a rule evaluation after it, and room for a slow
# machine: a few intervals, never more.
DEADLINE_S = SCRAPE_S * 8
TENANT = "metrics"
JOBS = {
    "gateway",
    "safety",
    "tokenizer",
    "router",
    "billing",
    "imageres",
    "worker",
    "haproxy",
    "prometheus",
}
BACKENDS = JOBS - {"gateway", "haproxy", "prometheus"}
MODEL = "turnpike-sim"
EVERY_TURN_STAGES = {"validate_history", "resolve_model", "safety", "render", "route", "generate"}


class Prometheus:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=f"{url}/api/v1", timeout=10)

    def get(self, path: str, **params: str) -> Any:
        reply = self.http.get(path, params=params)
        reply.raise_for_status()
        body = reply.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> dict[tuple, float]:
        """An instant vector as {label values sorted by name: value}."""
        data = self.get("/query", query=promql)
        assert data["resultType"] == "vector", data
        return {
            tuple(sorted(sample["metric"].items())): float(sample["value"][1])
            for sample in data["result"]
        }

    def by(self, label: str, promql: str) -> dict[str, float]:
        return {dict(key).get(label, ""): value for key, value in self.query(promql).items()}

    def value(self, promql: str) -> float:
        values = list(self.query(promql).values())
        assert len(values) == 1, f"{promql}: {values}"
        return values[0]

    def metric_type(self, family: str) -> str:
        """The type a target declared for ``family``: the name of the metric family as
        OpenMetrics writes it (a counter without ``_total``), which the services serve
        to Prometheus."""
        entries = self.get("/metadata", metric=family).get(family, [])
        assert entries, f"no metadata for {family}"
        return entries[0]["type"]


def until(check: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """``check()`` once it returns something truthy without failing an assertion; after
    ``deadline_s``, the last failure."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            result = check()
            if result:
                return result
            last = f"{what}: got {result!r}"
        except AssertionError as err:
            last = f"{what}: {err}"
        if time.monotonic() > end:
            pytest.fail(f"after {deadline_s:g} s, {last}", pytrace=False)
        time.sleep(1.0)


@pytest.fixture(scope="module")
def prometheus(container_stack) -> Prometheus:
    return Prometheus(container_stack.prometheus)


@pytest.fixture(scope="module")
def traffic(container_stack) -> dict[str, int]:
    """Responses this module's tenant completed, by transport (http, sse, websocket)."""
    sent = {"http": 0, "sse": 0, "websocket": 0}
    with OpenAI(
        base_url=container_stack.base_url,
        api_key=container_stack.keys[TENANT],
        max_retries=0,
        timeout=60,
    ) as client:
        for pipeline in ("sprint", "sprint", "legacy"):
            response = client.responses.create(
                model=MODEL,
                input="Say hello",
                extra_headers={"X-Turnpike-Pipeline": pipeline},
            )
            assert response.status == "completed"
            sent["http"] += 1
        with client.responses.stream(model=MODEL, input="Weather in Lisbon?") as stream:
            for _ in stream:
                pass
            assert stream.get_final_response().status == "completed"
        sent["sse"] += 1
        with client.responses.connect() as conn:
            previous = None
            for turn in range(3):
                body: dict[str, Any] = {"input": "Weather in Oslo?"}
                if previous is not None:
                    call = only_call(previous)
                    body = {
                        "previous_response_id": previous.id,
                        "input": tool_result(call.call_id, f"rain {turn}", "And tomorrow?"),
                    }
                conn.response.create(model=MODEL, tools=[WEATHER_TOOL], **body)
                for event in conn:
                    if event.type in ("response.completed", "response.failed", "error"):
                        break
                assert event.type == "response.completed", event
                previous = event.response
                sent["websocket"] += 1
    return sent


def test_every_target_is_up(prometheus):
    def all_up() -> list[dict]:
        targets = prometheus.get("/targets", state="active")["activeTargets"]
        down = [(t["labels"]["instance"], t["health"], t["lastError"]) for t in targets]
        down = [d for d in down if d[1] != "up"]
        assert targets and not down, f"not up: {down}"
        return targets

    jobs: dict[str, list[str]] = {}
    for target in until(all_up, "every target up"):
        jobs.setdefault(target["labels"]["job"], []).append(target["labels"]["instance"])
    assert set(jobs) == JOBS
    assert sorted(jobs["worker"]) == ["worker-1:9464", "worker-2:9464"]
    assert sorted(jobs["gateway"]) == ["gateway-1:9464", "gateway-2:9464"]


def test_responses_and_tokens_of_the_tenant_are_counted_exactly(prometheus, traffic):
    expected = {transport: float(n) for transport, n in traffic.items()}

    def counted() -> dict[str, float]:
        got = prometheus.by(
            "transport",
            f'sum by (transport) (turnpike_gateway_responses_total{{tenant="{TENANT}", '
            'outcome="completed"})',
        )
        assert got == expected
        return got

    until(counted, "responses of the tenant by transport")
    assert prometheus.metric_type("turnpike_gateway_responses") == "counter"
    tokens = prometheus.by(
        "type", f'sum by (type) (turnpike_gateway_tokens_total{{tenant="{TENANT}"}})'
    )
    assert tokens.get("input", 0) > 0 and tokens.get("output", 0) > 0, tokens


@pytest.mark.parametrize(
    "histogram",
    [
        "gen_ai_server_time_to_first_token_seconds",
        "gen_ai_server_request_duration_seconds",
        "turnpike_gateway_api_overhead_seconds",
    ],
)
def test_turn_histograms_count_the_traffic(prometheus, traffic, histogram):
    def counted() -> dict[str, float]:
        got = prometheus.by("transport", f"sum by (transport) ({histogram}_count)")
        short = {t: n for t, n in traffic.items() if got.get(t, 0) < n}
        assert not short, f"fewer than sent: {got} vs {traffic}"
        return got

    until(counted, f"{histogram} by transport")
    assert prometheus.metric_type(histogram) == "histogram"
    # Cumulative buckets, the last (+Inf) equal to the count; every turn took time, and
    # none a minute.
    buckets = prometheus.by("le", f"sum by (le) ({histogram}_bucket)")
    values = [buckets[le] for le in sorted(buckets, key=float)]
    assert values == sorted(values) and max(buckets, key=float) == "+Inf"
    assert prometheus.value(f'sum({histogram}_bucket{{le="+Inf"}}) - sum({histogram}_count)') == 0
    assert 0 < prometheus.value(f"sum({histogram}_sum) / sum({histogram}_count)") < 60


def test_overhead_is_part_of_the_turn(prometheus, traffic):
    """Overhead is a turn's time less the model's: never more than the turn."""
    ratio = until(
        lambda: prometheus.query(
            "sum(turnpike_gateway_api_overhead_seconds_sum)"
            " / sum(gen_ai_server_request_duration_seconds_sum)"
        ),
        "overhead and end-to-end sums",
    )
    [value] = ratio.values()
    assert 0 < value <= 1, value


def test_stage_durations_by_pipeline(prometheus, traffic):
    def stages() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for key in prometheus.query(
            "sum by (pipeline, stage) (turnpike_gateway_stage_duration_seconds_count)"
        ):
            labels = dict(key)
            found.setdefault(labels["pipeline"], set()).add(labels["stage"])
        assert {"sprint", "legacy", "connection"} <= set(found), found
        return found

    found = until(stages, "stage durations of every pipeline")
    assert prometheus.metric_type("turnpike_gateway_stage_duration_seconds") == "histogram"
    # What every turn runs (load_conversation only runs for a follow-up).
    for pipeline, names in found.items():
        assert EVERY_TURN_STAGES <= names, (pipeline, names)


def test_billing_records_every_response(prometheus, traffic):
    def recorded() -> float:
        value = prometheus.value('sum(turnpike_billing_events_recorded_total{job="billing"})')
        assert value >= sum(traffic.values()), value
        return value

    until(recorded, "billing events recorded")
    assert prometheus.metric_type("turnpike_billing_events_recorded") == "counter"


def test_every_grpc_service_counts_its_calls(prometheus, traffic):
    def handled() -> dict[str, float]:
        got = prometheus.by(
            "job", 'sum by (job) (turnpike_grpc_server_handled_total{grpc_code="OK"})'
        )
        assert BACKENDS <= {job for job, n in got.items() if n > 0}, got
        return got

    until(handled, "gRPC calls handled by every backend")
    assert prometheus.metric_type("turnpike_grpc_server_handling_seconds") == "histogram"


def test_the_rules_load_and_evaluate_on_real_series(prometheus, traffic):
    """Every rule of rules.yml is loaded and evaluates without error, and the recorded
    series the traffic feeds have values: the rules name what the services export."""
    shipped = yaml.safe_load((REPO / "deploy" / "prometheus" / "rules.yml").read_text())
    groups = prometheus.get("/rules")["groups"]
    loaded = [rule for group in groups for rule in group["rules"]]
    assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in shipped["groups"])
    assert sorted(r["name"] for r in loaded) == sorted(
        r.get("record") or r["alert"] for g in shipped["groups"] for r in g["rules"]
    )
    for rule in loaded:
        assert rule["health"] in ("ok", "unknown") and not rule.get("lastError"), rule

    def recorded() -> dict[str, dict[str, float]]:
        got = {
            name: prometheus.by("pipeline", name)
            for name in (
                "pipeline_transport:turnpike_gateway_responses:rate1m",
                "pipeline:turnpike_gateway_api_overhead_seconds:p99_5m",
                "pipeline:gen_ai_server_time_to_first_token_seconds:p50_5m",
                "pipeline_stage:turnpike_gateway_stage_duration_seconds:p50_5m",
            )
        }
        missing = [name for name, values in got.items() if "sprint" not in values]
        assert not missing, f"no sprint series yet: {missing}"
        return got

    until(recorded, "recorded series")
    ratios = prometheus.by("cache", "cache:turnpike_gateway_cache_lookups:hit_ratio_5m")
    assert ratios and all(0 <= r <= 1 for r in ratios.values()), ratios
