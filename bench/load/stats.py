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


def find(cells: list[dict[str, Any]], transport: str, loops: int) -> dict[str, Any] | None:
    return next((c for c in cells if c["transport"] == transport and c["loops"] == loops), None)


def cell_at(cells: list[dict[str, Any]], transport: str, loops: int) -> dict[str, Any]:
    """``find``, where the caller has checked that the cell is there."""
    cell = find(cells, transport, loops)
    assert cell is not None
    return cell


def add_ratios(cells: list[dict[str, Any]]) -> None:
    """Each cell's p50 (and p90) overhead against the same transport's with one loop."""
    for cell in cells:
        alone = find(cells, cell["transport"], 1)
        for q in ("p50", "p90"):
            base = alone and alone["overhead_ms"][q]
            value = cell["overhead_ms"][q]
            ratio = round(value / base, 3) if base and value is not None else None
            cell[f"overhead_{q}_vs_1"] = ratio


def targets(cells: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """The issue's three capacity questions, answered from the cells that were run."""
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
        out.append(
            {
                "name": f"50 loops over {cell['transport']} at {model}: p50 overhead vs one loop",
                "measured": cell["overhead_p50_vs_1"],
                "goal": "within 2x",
                "pass": None
                if cell["overhead_p50_vs_1"] is None
                else cell["overhead_p50_vs_1"] <= 2 and not cell["error_count"],
                "detail": f"{cell['overhead_ms']['p50']} ms vs {base} "
                f"({cell['overhead_p50_vs_1']}x); {cell['error_count']} errors; "
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
                f"connections) in {cell['turns_sent']} turns; overhead p50/p90/p99 "
                f"{o['p50']}/{o['p90']}/{o['p99']} ms, p50 {cell['overhead_p50_vs_1']}x "
                f"one loop's; {cell['turns_per_s']} turns/s",
            }
        )
    return out
