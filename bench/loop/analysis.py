"""From raw loop records to medians, ratios and the issue's targets (pure).

Conventions (stated in the report too):

- A cell is one (model speed, tool time, variant); its loops are the repetitions.
- Per-loop figures first, then the median over repetitions. Per-turn curves are, for
  each turn number, the median over repetitions.
- Follow-up TTFT of a loop: the mean TTFT of its turns 2..N (every request that
  continues the conversation), so a long history counts as often as it happens.
- API overhead of a turn: the client-observed turn time minus the model time the worker
  reports (``model_ms.total_ms``). Of a loop: the sum over its turns.
- Loop breakdown (sums to the loop time): model (the worker's time), API overhead, and
  tool + client (everything between turns: the tool's sleep, building the next request).
- "X% faster" end to end means X% less loop time (1 - t_variant / t_legacy); the speed-up
  factor t_legacy / t_variant is shown beside it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bench.loop.variants import CONNECTION, DIRECT, INJECT, LEGACY, SPRINT, VARIANTS

FAST = 1000.0  # the speed most targets are stated at
BURST = 4000.0
SLOW = 65.0


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def _r(value: float, digits: int = 3) -> float | None:
    return None if value != value else round(value, digits)  # NaN -> null in JSON


def _loop_figures(loop: dict[str, Any]) -> dict[str, Any]:
    turns = loop["turns"]
    follow = [t["ttft_ms"] for t in turns[1:]]
    model = sum(t["model_ms"].get("total_ms", 0.0) for t in turns)
    overhead = sum(t["overhead_ms"] for t in turns)
    turn_time = sum(t["turn_ms"] for t in turns)
    stages: dict[str, float] = defaultdict(float)
    for t in turns:
        for stage, ms in t["stages_ms"].items():
            stages[stage] += ms
    return {
        "loop_ms": loop["loop_ms"],
        "first_ttft_ms": turns[0]["ttft_ms"],
        "followup_ttft_ms": statistics.fmean(follow) if follow else float("nan"),
        "model_ms": model,
        "overhead_ms": overhead,
        "tool_client_ms": loop["loop_ms"] - turn_time,
        "stages_ms": dict(stages),
        "client_cpu_ms_per_turn": loop.get("client_cpu_ms", 0.0) / len(turns),
        "service_cpu_ms_per_turn": {
            k: v / len(turns) for k, v in (loop.get("service_cpu_ms") or {}).items()
        },
        "input_tokens_last": turns[-1]["input_tokens"],
    }


def _per_turn(
    loops: Sequence[dict[str, Any]], key: str, value: Callable[[Any], float] = lambda v: v
) -> list[float | None]:
    """The median over loops of each turn's ``value(turn[key])``."""
    count = min(len(loop["turns"]) for loop in loops)
    return [_r(median(value(loop["turns"][i][key]) for loop in loops)) for i in range(count)]


def _median_dicts(dicts: Sequence[dict[str, float]]) -> dict[str, float | None]:
    keys = sorted({k for d in dicts for k in d})
    return {k: _r(median(d.get(k, 0.0) for d in dicts)) for k in keys}


def summarize_cell(loops: Sequence[dict[str, Any]]) -> dict[str, Any]:
    figures = [_loop_figures(loop) for loop in loops]
    first = loops[0]
    last_turn_stages = [loop["turns"][-1]["stages_ms"] for loop in loops]
    second_turn_stages = [loop["turns"][1]["stages_ms"] for loop in loops if len(loop["turns"]) > 1]
    per_turn_overhead = _per_turn(loops, "overhead_ms")
    cell = {
        "model": first["model"],
        "tool_ms": first["tool_ms"],
        "variant": first["variant"],
        "n": len(loops),
        "loop_ms": _r(median(f["loop_ms"] for f in figures)),
        "loop_ms_all": [_r(f["loop_ms"]) for f in figures],
        "first_ttft_ms": _r(median(f["first_ttft_ms"] for f in figures)),
        "followup_ttft_ms": _r(median(f["followup_ttft_ms"] for f in figures)),
        "model_ms": _r(median(f["model_ms"] for f in figures)),
        "overhead_ms": _r(median(f["overhead_ms"] for f in figures)),
        "tool_client_ms": _r(median(f["tool_client_ms"] for f in figures)),
        "overhead_turn2_ms": per_turn_overhead[1] if len(per_turn_overhead) > 1 else None,
        "overhead_last_ms": per_turn_overhead[-1],
        "input_tokens_last": int(median(f["input_tokens_last"] for f in figures)),
        "stages_ms_per_loop": _median_dicts([f["stages_ms"] for f in figures]),
        "stages_ms_turn2": _median_dicts(second_turn_stages),
        "stages_ms_last_turn": _median_dicts(last_turn_stages),
        "client_cpu_ms_per_turn": _r(median(f["client_cpu_ms_per_turn"] for f in figures)),
        "send_ms_per_turn": _r(median(t["send_ms"] for loop in loops for t in loop["turns"])),
        "service_cpu_ms_per_turn": _median_dicts([f["service_cpu_ms_per_turn"] for f in figures]),
        "per_turn": {
            "ttft_ms": _per_turn(loops, "ttft_ms"),
            "turn_ms": _per_turn(loops, "turn_ms"),
            "overhead_ms": per_turn_overhead,
            "model_ms": _per_turn(loops, "model_ms", lambda m: m.get("total_ms", 0.0)),
            "input_tokens": _per_turn(loops, "input_tokens"),
        },
    }
    return cell


def summarize(loops: Sequence[dict[str, Any]], speeds: dict[str, float]) -> list[dict[str, Any]]:
    """Every cell's summary, with its speed-up over legacy in the same (speed, tool) pair."""
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = defaultdict(list)
    for loop in loops:
        groups[(loop["model"], loop["tool_ms"], loop["variant"])].append(loop)
    cells = []
    for (model, _, _), members in groups.items():
        cell = summarize_cell(members)
        cell["tokens_per_second"] = speeds[model]
        cells.append(cell)
    order = {v: i for i, v in enumerate(VARIANTS)}
    cells.sort(key=lambda c: (c["tokens_per_second"], c["tool_ms"], order[c["variant"]]))
    for cell in cells:
        legacy = find(cells, cell["tokens_per_second"], cell["tool_ms"], LEGACY)
        if legacy and legacy["loop_ms"] and cell["loop_ms"]:
            cell["speedup_vs_legacy"] = _r(legacy["loop_ms"] / cell["loop_ms"])
            cell["reduction_vs_legacy"] = _r(1 - cell["loop_ms"] / legacy["loop_ms"])
    return cells


def find(
    cells: Sequence[dict[str, Any]], speed: float, tool_ms: float, variant: str
) -> dict[str, Any] | None:
    for cell in cells:
        if (
            cell["tokens_per_second"] == speed
            and cell["tool_ms"] == tool_ms
            and cell["variant"] == variant
        ):
            return cell
    return None


# -- the targets -------------------------------------------------------------------


def _target(
    name: str, goal: str, measured: float | None, passed: bool | None, detail: str
) -> dict[str, Any]:
    return {
        "name": name,
        "target": goal,
        "measured": _r(measured) if measured is not None else None,
        "pass": passed,
        "detail": detail,
    }


def _missing(name: str, goal: str, why: str) -> dict[str, Any]:
    return _target(name, goal, None, None, f"not measured in this run ({why})")


def _ceiling(
    direct: dict[str, Any] | None,
    legacy: dict[str, Any],
    better: dict[str, Any],
    key: str,
    goal: float,
) -> str:
    """What bounds the gain in this run. The ceiling: no API time at all (the loop talking
    straight to the worker); a goal above it cannot be met by the API services. And the
    model time at which the goal would be met with the API times measured here: with
    model time m and API times a (legacy) and b (``better``), (m + b) / (m + a) <= 1 - goal
    holds for m <= ((1 - goal) a - b) / goal."""
    if not direct or not direct.get(key) or not legacy.get(key) or not better.get(key):
        return ""
    model, slow_api, fast_api = direct[key], legacy[key] - direct[key], better[key] - direct[key]
    text = f"; ceiling with zero API time (the worker directly): {1 - model / legacy[key]:.0%}"
    reachable = ((1 - goal) * slow_api - fast_api) / goal
    if reachable <= 0:
        return text + "; no model time would meet the goal with these API times"
    unit, scale = ("s", 1e-3) if key == "loop_ms" else ("ms", 1.0)
    return (
        f"{text}; met with these API times if the time outside them (model, tools) were "
        f"at most {reachable * scale:.2f} {unit} (it is {model * scale:.2f} {unit})"
    )


def targets(
    cells: Sequence[dict[str, Any]], load: dict[str, Any] | None, tool_times: Sequence[float]
) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    for tool_ms in tool_times:
        tag = f"tool {tool_ms:g} ms"

        def get(speed: float, variant: str, tool_ms: float = tool_ms) -> dict[str, Any] | None:
            return find(cells, speed, tool_ms, variant)

        # 1. follow-up TTFT, sprint vs legacy, at 1,000 tok/s (tool time does not enter it)
        name, goal = f"Follow-up TTFT, sprint vs legacy, 1,000 tok/s, {tag}", ">= 45% lower"
        sprint, legacy = get(FAST, SPRINT), get(FAST, LEGACY)
        if tool_ms == tool_times[0]:  # reported once, not per tool time
            if sprint and legacy:
                cut = 1 - sprint["followup_ttft_ms"] / legacy["followup_ttft_ms"]
                result.append(
                    _target(
                        name,
                        goal,
                        cut,
                        cut >= 0.45,
                        f"{sprint['followup_ttft_ms']:.1f} ms vs {legacy['followup_ttft_ms']:.1f} ms "
                        f"({cut:.0%} lower)"
                        + _ceiling(get(FAST, DIRECT), legacy, sprint, "followup_ttft_ms", 0.45),
                    )
                )
            else:
                result.append(_missing(name, goal, "1,000 tok/s not run"))

        # 2. end to end, connection vs legacy, at each speed
        cuts: dict[float, float] = {}
        for speed in (SLOW, FAST, BURST):
            conn, legacy = get(speed, CONNECTION), get(speed, LEGACY)
            if conn and legacy:
                cuts[speed] = 1 - conn["loop_ms"] / legacy["loop_ms"]
        name = f"End-to-end loop, connection vs legacy, 1,000 tok/s, {tag}"
        if FAST in cuts:
            conn, legacy = get(FAST, CONNECTION), get(FAST, LEGACY)
            assert conn and legacy  # a cut at FAST was taken from both
            result.append(
                _target(
                    name,
                    ">= 40% less time",
                    cuts[FAST],
                    cuts[FAST] >= 0.40,
                    f"{conn['loop_ms'] / 1000:.2f} s vs {legacy['loop_ms'] / 1000:.2f} s "
                    f"({cuts[FAST]:.0%} less, {legacy['loop_ms'] / conn['loop_ms']:.2f}x)"
                    + _ceiling(get(FAST, DIRECT), legacy, conn, "loop_ms", 0.40),
                )
            )
        else:
            result.append(_missing(name, ">= 40% less time", "1,000 tok/s not run"))
        name = f"End-to-end gain at 4,000 tok/s above the gain at 1,000, {tag}"
        if FAST in cuts and BURST in cuts:
            result.append(
                _target(
                    name,
                    "gain(4,000) > gain(1,000)",
                    cuts[BURST],
                    cuts[BURST] > cuts[FAST],
                    f"{cuts[BURST]:.0%} less time at 4,000 vs {cuts[FAST]:.0%} at 1,000",
                )
            )
        else:
            result.append(_missing(name, "gain(4,000) > gain(1,000)", "needs both speeds"))
        name = f"End-to-end gain shrinks at 65 tok/s, {tag}"
        if FAST in cuts and SLOW in cuts:
            result.append(
                _target(
                    name,
                    "gain(65) < gain(1,000)",
                    cuts[SLOW],
                    cuts[SLOW] < cuts[FAST],
                    f"{cuts[SLOW]:.0%} less time at 65 vs {cuts[FAST]:.0%} at 1,000 "
                    "(see the breakdown plot: model time dominates)",
                )
            )
        else:
            result.append(_missing(name, "gain(65) < gain(1,000)", "needs both speeds"))

        # 3. connection overhead flat in history, and close to the lower bound
        conn, direct = get(FAST, CONNECTION), get(FAST, DIRECT)
        name = f"Connection API overhead flat: last turn vs 2nd, 1,000 tok/s, {tag}"
        if tool_ms == tool_times[0]:  # reported once, not per tool time
            if conn and conn["overhead_turn2_ms"]:
                ratio = conn["overhead_last_ms"] / conn["overhead_turn2_ms"]
                result.append(
                    _target(
                        name,
                        "<= 1.2x",
                        ratio,
                        ratio <= 1.2,
                        f"{conn['overhead_last_ms']:.1f} ms vs {conn['overhead_turn2_ms']:.1f} ms",
                    )
                )
            else:
                result.append(_missing(name, "<= 1.2x", "1,000 tok/s not run"))
        name = f"Connection loop vs the worker directly, 1,000 tok/s, {tag}"
        if conn and direct:
            ratio = conn["loop_ms"] / direct["loop_ms"]
            result.append(
                _target(
                    name,
                    "<= 1.15x",
                    ratio,
                    ratio <= 1.15,
                    f"{conn['loop_ms'] / 1000:.2f} s vs {direct['loop_ms'] / 1000:.2f} s",
                )
            )
        else:
            result.append(_missing(name, "<= 1.15x", "1,000 tok/s not run"))

        # 4. inject: the API overhead of a tool round trip inside one response
        inject = get(FAST, INJECT)
        name = f"Inject API overhead per tool round trip vs connection, 1,000 tok/s, {tag}"
        if inject and conn and direct:
            per_trip = {
                c["variant"]: c["overhead_ms"] / len(c["per_turn"]["overhead_ms"])
                for c in (inject, conn, direct)
            }
            ratio = per_trip[INJECT] / per_trip[CONNECTION]
            result.append(
                _target(
                    name,
                    "< 1x (the floor)",
                    ratio,
                    ratio < 1,
                    f"{per_trip[INJECT]:.1f} ms vs {per_trip[CONNECTION]:.1f} ms a turn "
                    f"(the worker directly: {per_trip[DIRECT]:.1f} ms); loop "
                    f"{inject['loop_ms'] / 1000:.2f} s vs {conn['loop_ms'] / 1000:.2f} s",
                )
            )
        else:
            result.append(_missing(name, "< 1x (the floor)", "1,000 tok/s not run"))

    # 5. load
    stream = (load or {}).get("one_connection")
    name, goal = "One connection carries 4,000 tok/s (client-observed decode rate)", ">= 90%"
    if stream and stream.get("client_tokens_per_s_overall"):
        rate = stream["client_tokens_per_s_overall"]
        share = rate / BURST
        result.append(
            _target(
                name,
                goal + " of 4,000",
                share,
                share >= 0.9,
                f"{rate:,.0f} tok/s over {len(stream['turns'])} long outputs "
                f"(worker's own rate {stream['worker_tokens_per_s_median']:,.0f})",
            )
        )
    else:
        result.append(_missing(name, goal, "load phase skipped"))
    many = (load or {}).get("concurrent_loops")
    sweep = (many or {}).get("sweep")
    for cell in (many or {}).get("cells", []):
        assert many is not None  # its cells are being read
        name = (
            f"{many['loops']} concurrent loops at 1,000 tok/s: per-turn overhead vs one loop, "
            f"tool {cell['tool_ms']:g} ms"
        )
        ratio = cell["overhead_ratio"]
        result.append(
            _target(
                name,
                "<= 2x",
                ratio,
                ratio <= 2,
                f"median {cell['concurrent']['overhead_ms']['median']:.1f} ms "
                f"(p90 {cell['concurrent']['overhead_ms']['p90']:.1f}) vs "
                f"{cell['single']['overhead_ms']['median']:.1f} ms alone"
                + (
                    f"; within 2x up to {sweep['max_loops_within_2x']} loops at once"
                    if sweep and sweep["tool_ms"] == cell["tool_ms"]
                    else ""
                ),
            )
        )
    if not many:
        result.append(
            _missing(
                "Concurrent loops: per-turn overhead vs one loop", "<= 2x", "load phase skipped"
            )
        )
    return result


# -- what the tables and plots show ------------------------------------------------------

STAGE_ORDER = (
    "load_conversation",
    "validate_history",
    "resolve_model",
    "safety",
    "resolve_images",
    "render",
    "route",
)


def speed_label(value: float) -> str:
    return f"{value:,.0f} tok/s"


def reference_cell_key(data: dict[str, Any]) -> tuple[float, float]:
    """The (speed, tool) pair the per-turn plots show: 1,000 tok/s and no tool time when
    run, else the first pair that was."""
    pairs = [(c["tokens_per_second"], c["tool_ms"]) for c in data["cells"]]
    return (FAST, 0.0) if (FAST, 0.0) in pairs else pairs[0]
