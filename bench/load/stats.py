"""What one cell (a transport at N loops at once) observed, and the numbers drawn from it
(pure: no I/O, no clock)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.load.transports import Reply, TurnFailed
from bench.services.common import percentile

# The stack's processes, in the order the tables show them (workers summed as "worker").
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")
# The tracing variant's OTLP collector (``bench.load.collector``), metered apart.
COLLECTOR = "collector"
# The goal for 50 loops at once: p50 API overhead within this many times one loop's.
FIFTY_LOOPS_GOAL = 3.0


def dist(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p90, p99 (nearest rank: each a real sample), mean and max, rounded to µs."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None, "n": 0}
    return {
        "p50": round(percentile(values, 50), 3),
        "p90": round(percentile(values, 90), 3),
        "p99": round(percentile(values, 99), 3),
        "mean": round(statistics.fmean(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
    }


def call_of(response: dict[str, Any]) -> tuple[str, str] | None:
    """(call_id, name) of the response's function call, if it made one."""
    for item in response.get("output") or ():
        if item.get("type") == "function_call":
            return item["call_id"], item["name"]
    return None


@dataclass
class Tally:
    """Everything the loops of one cell saw. Every turn sent ends exactly once: completed
    (``ok``) or failed (``turn_errors``); errors that are not a turn's (a connection that
    would not open, an answer off the script) are counted in ``errors`` too."""

    sent: int = 0
    ok: int = 0
    turn_errors: int = 0
    dropped: int = 0
    loops_done: int = 0
    loops_cut: int = 0  # ended early by an error
    input_tokens: int = 0
    output_tokens: int = 0
    turn_ms: list[float] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    connect_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # Refusals that asked to be tried again and were (503 server_overloaded, 426), by kind.
    retried: Counter[str] = field(default_factory=Counter)
    messages: dict[str, str] = field(default_factory=dict)  # kind -> the first one's message
    pipelines: Counter[str] = field(default_factory=Counter)

    def completed(self, reply: Reply) -> None:
        response = reply.response
        vendor = response.get("turnpike") or {}
        model_ms = (vendor.get("model_ms") or {}).get("total_ms") or 0.0
        usage = response.get("usage") or {}
        self.ok += 1
        self.turn_ms.append(reply.turn_ms)
        self.overhead_ms.append(reply.turn_ms - model_ms)
        self.ttft_ms.append(reply.ttft_ms)
        self.input_tokens += usage.get("input_tokens") or 0
        self.output_tokens += usage.get("output_tokens") or 0
        self.pipelines[vendor.get("pipeline") or "?"] += 1

    def failed(self, error: TurnFailed, *, turn: bool) -> None:
        self.errors[error.kind] += 1
        if error.message:
            self.messages.setdefault(error.kind, error.message)
        self.dropped += error.dropped
        self.turn_errors += turn


def cell_record(
    transport: str,
    loops: int,
    rollouts_per_loop: int,
    turns: int,
    tally: Tally,
    wall_s: float,
    client_cpu_ms: float,
    service_cpu_ms: dict[str, float],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One cell's numbers: rates over the wall time, distributions over completed turns,
    CPU per completed turn (each service, the stack, this client)."""
    done = max(1, tally.ok)
    wall_ms = max(wall_s * 1000, 1e-9)
    per_turn = {
        name: round(service_cpu_ms[name] / done, 3) for name in SERVICES if name in service_cpu_ms
    }
    if per_turn:
        per_turn["stack"] = round(sum(service_cpu_ms.get(name, 0.0) for name in SERVICES) / done, 3)
    if COLLECTOR in service_cpu_ms:  # a trace collector's: beside the stack, not in it
        per_turn[COLLECTOR] = round(service_cpu_ms[COLLECTOR] / done, 3)
    return {
        "transport": transport,
        "loops": loops,
        "rollouts_per_loop": rollouts_per_loop,
        "turns_per_rollout": turns,
        "turns_planned": loops * rollouts_per_loop * turns,
        "turns_sent": tally.sent,
        "turns_ok": tally.ok,
        "turn_errors": tally.turn_errors,
        "errors": dict(tally.errors.most_common()),
        "error_count": sum(tally.errors.values()),
        "retried": dict(tally.retried.most_common()),
        "retried_count": sum(tally.retried.values()),
        "error_messages": tally.messages,
        "dropped": tally.dropped,
        "loops_done": tally.loops_done,
        "loops_cut": tally.loops_cut,
        "wall_s": round(wall_s, 3),
        "turns_per_s": round(tally.ok / wall_s, 2) if wall_s > 0 else None,
        "output_tokens_per_s": round(tally.output_tokens / wall_s, 1) if wall_s > 0 else None,
        "input_tokens_per_turn": round(tally.input_tokens / done, 1),
        "turn_ms": dist(tally.turn_ms),
        "overhead_ms": dist(tally.overhead_ms),
        "ttft_ms": dist(tally.ttft_ms),
        "connect_ms": dist(tally.connect_ms),
        "pipelines": dict(tally.pipelines),
        "cpu_ms": {k: round(v, 1) for k, v in sorted(service_cpu_ms.items())},
        "cpu_ms_per_turn": per_turn,
        "client_cpu_ms": round(client_cpu_ms, 1),
        "client_cpu_ms_per_turn": round(client_cpu_ms / done, 3),
        # Cores busy on average over the cell: where the machine's two went.
        "stack_cores": round(sum(service_cpu_ms.get(n, 0.0) for n in SERVICES) / wall_ms, 3),
        "client_cores": round(client_cpu_ms / wall_ms, 3),
        **(extra or {}),
    }


def find(
    cells: list[dict[str, Any]], transport: str, loops: int, variant: str | None = None
) -> dict[str, Any] | None:
    """The cell of ``transport`` at ``loops`` (of ``variant``, when given)."""
    return next(
        (
            c
            for c in cells
            if c["transport"] == transport
            and c["loops"] == loops
            and (variant is None or c.get("variant") == variant)
        ),
        None,
    )


def cell_at(
    cells: list[dict[str, Any]], transport: str, loops: int, variant: str | None = None
) -> dict[str, Any]:
    """``find``, where the caller has checked that the cell is there."""
    cell = find(cells, transport, loops, variant)
    assert cell is not None
    return cell


def variants_of(cells: list[dict[str, Any]]) -> list[str]:
    """The variants the cells belong to, in the order they first appear."""
    return list(dict.fromkeys(c.get("variant", "") for c in cells))


# The figures a summary takes the median of over a cell's repeats.
_DISTRIBUTIONS = ("turn_ms", "overhead_ms", "ttft_ms")
_RATES = ("turns_per_s", "client_cpu_ms_per_turn", "stack_cores", "client_cores")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per variant, transport and loops at once: a cell run once is itself; a
    cell repeated has, for each figure, the median over its repeats (errors and turns
    summed), so one slow repeat does not decide a comparison."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for cell in cells:
        key = (cell.get("variant", ""), cell["transport"], cell["loops"])
        groups.setdefault(key, []).append(cell)
    out = []
    for repeats in groups.values():
        if len(repeats) == 1:
            out.append(dict(repeats[0], repeats=1))
            continue
        record = dict(repeats[0], repeats=len(repeats))
        for name in _DISTRIBUTIONS:
            record[name] = {
                q: _median([r[name][q] for r in repeats if r[name][q] is not None] or [0.0])
                for q in ("p50", "p90", "p99")
            } | {"n": sum(r[name]["n"] for r in repeats)}
        for name in _RATES:
            record[name] = _median([r[name] for r in repeats if r[name] is not None] or [0.0])
        services = {s for r in repeats for s in r["cpu_ms_per_turn"]}
        record["cpu_ms_per_turn"] = {
            s: _median([r["cpu_ms_per_turn"][s] for r in repeats if s in r["cpu_ms_per_turn"]])
            for s in services
        }
        for name in ("turns_sent", "turns_ok", "turn_errors", "error_count", "dropped"):
            record[name] = sum(r[name] for r in repeats)
        record["retried_count"] = sum(r.get("retried_count", 0) for r in repeats)
        errors: Counter[str] = Counter()
        for r in repeats:
            errors.update(r["errors"])
        record["errors"] = dict(errors.most_common())
        out.append(record)
    return out


def add_hops(records: list[dict[str, Any]], hop_cpu_ms: float | None) -> None:
    """Each record's CPU per turn also in the machine's unit (``bench.load.machine_unit``):
    how many empty gRPC round trips' worth of CPU it is."""
    for record in records:
        per = record["cpu_ms_per_turn"]
        record["cpu_hops_per_turn"] = (
            {name: round(ms / hop_cpu_ms, 2) for name, ms in per.items()} if hop_cpu_ms else {}
        )


def add_ratios(cells: list[dict[str, Any]]) -> None:
    """Each cell's p50 (and p90) overhead against the same transport's with one loop
    (of the same variant)."""
    for cell in cells:
        alone = find(cells, cell["transport"], 1, cell.get("variant"))
        for q in ("p50", "p90"):
            base = alone and alone["overhead_ms"][q]
            value = cell["overhead_ms"][q]
            ratio = round(value / base, 3) if base and value is not None else None
            cell[f"overhead_{q}_vs_1"] = ratio


def targets(cells: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The capacity questions, answered from the cells that were run (of each variant,
    named first when there are several)."""
    out: list[dict[str, Any]] = []
    variants = variants_of(cells)
    for variant in variants:
        prefix = f"[{variant}] " if len(variants) > 1 else ""
        mine = [c for c in cells if c.get("variant", "") == variant]
        out += [dict(t, name=prefix + t["name"], variant=variant) for t in _targets(mine, model)]
    return out


def _targets(cells: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    one = find(cells, "websocket", 1)
    if one:
        o = one["overhead_ms"]
        out.append(
            {
                "name": "One loop over WebSocket: p50 per-turn API overhead",
                "measured": o["p50"],
                "detail": f"{o['p50']} ms (p90 {o['p90']}, p99 {o['p99']}) over {o['n']} turns",
            }
        )
    for cell in (c for c in cells if c["loops"] == 50):
        alone = find(cells, cell["transport"], 1)
        base = f"{alone['overhead_ms']['p50']} ms alone" if alone else "no single-loop cell"
        ratio = cell["overhead_p50_vs_1"]
        out.append(
            {
                "name": f"50 loops over {cell['transport']} at {model}: p50 overhead vs one loop",
                "measured": ratio,
                "goal": f"within {FIFTY_LOOPS_GOAL:g}x",
                "pass": None
                if ratio is None
                else ratio <= FIFTY_LOOPS_GOAL and not cell["error_count"],
                "detail": f"{cell['overhead_ms']['p50']} ms vs {base} "
                f"({ratio}x); {cell['error_count']} errors; "
                f"{cell['turns_per_s']} turns/s",
            }
        )
    for cell in (c for c in cells if c["loops"] == 100):
        o = cell["overhead_ms"]
        out.append(
            {
                "name": f"100 loops over {cell['transport']}: errors, drops, degradation",
                "measured": cell["overhead_p50_vs_1"],
                "detail": f"{cell['error_count']} errors ({cell['dropped']} dropped "
                f"connections) in {cell['turns_sent']} turns, {cell.get('retried_count', 0)} "
                "shed and retried; overhead p50/p90/p99 "
                f"{o['p50']}/{o['p90']}/{o['p99']} ms, p50 {cell['overhead_p50_vs_1']}x "
                f"one loop's; {cell['turns_per_s']} turns/s",
            }
        )
    return out


def _ratio(value: float | None, reference: float | None) -> float | None:
    return round(value / reference, 3) if value is not None and reference else None


def comparisons(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each variant against the first (the reference), per transport and loops at once:
    p50 API overhead, turns/s and CPU per turn (the stack's and the gateway's), with their
    ratios (below 1: less than the reference's)."""
    variants = variants_of(records)
    if len(variants) < 2:
        return []
    reference, out = variants[0], []
    for base in (r for r in records if r.get("variant", "") == reference):
        for variant in variants[1:]:
            other = find(records, base["transport"], base["loops"], variant)
            if other is None:
                continue
            row: dict[str, Any] = {
                "transport": base["transport"],
                "loops": base["loops"],
                "variant": variant,
                "reference": reference,
            }
            for key, ref, value in (
                ("overhead_p50", base["overhead_ms"]["p50"], other["overhead_ms"]["p50"]),
                ("turns_per_s", base["turns_per_s"], other["turns_per_s"]),
                (
                    "stack_cpu_ms",
                    base["cpu_ms_per_turn"].get("stack"),
                    other["cpu_ms_per_turn"].get("stack"),
                ),
                (
                    "gateway_cpu_ms",
                    base["cpu_ms_per_turn"].get("gateway"),
                    other["cpu_ms_per_turn"].get("gateway"),
                ),
            ):
                row[key] = {"reference": ref, "value": value, "ratio": _ratio(value, ref)}
            out.append(row)
    return out
