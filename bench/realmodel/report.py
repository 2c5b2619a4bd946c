"""The real-model benchmark's figures, table and plot (``real-model.{json,md,png}``).

Per variant, medians over its loops: the loop's wall time, the model's time (the
server's own prefill and decode, reported in its ``timings``), the API overhead (the
client's turn time minus the model's), time to first token, and the prompt tokens the
server found cached. Tokens per second are the server's: uncached prompt tokens over
prefill time, output tokens over decode time, over every turn of the run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.loop.analysis import median, summarize_cell
from bench.loop.variants import CONNECTION, INJECT, LEGACY, SPRINT

COLD = "connection-ws-no-prefix-cache"
ORDER = (LEGACY, SPRINT, CONNECTION, INJECT, COLD)
LABELS = {
    LEGACY: "legacy (HTTP)",
    SPRINT: "sprint (HTTP)",
    CONNECTION: "connection (WebSocket)",
    INJECT: "inject (WebSocket)",
    COLD: "connection, server's prompt cache off",
}


def _r(value: float, digits: int = 1) -> float | None:
    return None if value != value else round(value, digits)


def rates(loops: list[dict[str, Any]]) -> dict[str, float | None]:
    """The server's prefill and decode speed over every turn of ``loops``."""
    prompt = prefill_ms = output = decode_ms = 0.0
    for loop in loops:
        for t in loop["turns"]:
            m = t["model_ms"]
            prompt += t["input_tokens"] - t["cached_tokens"]
            prefill_ms += m.get("prefill_ms", 0.0)
            output += t["output_tokens"]
            decode_ms += m.get("decode_ms", 0.0)
    return {
        "prefill_tokens_per_s": _r(prompt / prefill_ms * 1000) if prefill_ms else None,
        "decode_tokens_per_s": _r(output / decode_ms * 1000) if decode_ms else None,
    }


def variant_figures(loops: list[dict[str, Any]]) -> dict[str, Any]:
    cell = summarize_cell(loops)
    turns = [t for loop in loops for t in loop["turns"]]

    def per_loop(key: str) -> float:
        return median(sum(t["model_ms"].get(key, 0.0) for t in loop["turns"]) for loop in loops)

    follow = [t for t in turns if t["turn"] > 1]
    return {
        "n": len(loops),
        "loop_ms": cell["loop_ms"],
        "model_ms": cell["model_ms"],
        "prefill_ms": _r(per_loop("prefill_ms")),
        "decode_ms": _r(per_loop("decode_ms")),
        "overhead_ms": cell["overhead_ms"],
        "overhead_per_turn_ms": _r(median(t["overhead_ms"] for t in turns), 2),
        "first_ttft_ms": cell["first_ttft_ms"],
        "followup_ttft_ms": _r(median(t["ttft_ms"] for t in follow)),
        "followup_cached_share": _r(
            sum(t["cached_tokens"] for t in follow)
            / max(1, sum(t["input_tokens"] for t in follow)),
            3,
        ),
        "input_tokens_last": cell["input_tokens_last"],
        "output_tokens_per_turn": _r(median(t["output_tokens"] for t in turns)),
        **rates(loops),
        "per_turn": cell["per_turn"],
    }


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    by_variant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for loop in data["loops"]:
        by_variant[loop["variant"]].append(loop)
    variants = {v: variant_figures(by_variant[v]) for v in ORDER if by_variant.get(v)}
    base = variants.get(LEGACY)
    for figures in variants.values():
        if base and base["loop_ms"]:
            figures["loop_vs_legacy"] = round(figures["loop_ms"] / base["loop_ms"], 3)
        if base and base["overhead_ms"]:
            figures["overhead_vs_legacy"] = round(figures["overhead_ms"] / base["overhead_ms"], 3)
    warm = [loop for loop in data["loops"] if loop["variant"] != COLD]
    return {"variants": variants, "server": rates(warm)}


def markdown(data: dict[str, Any], summary: dict[str, Any]) -> str:
    plan, server = data["plan"], summary["server"]
    lines = [
        "# The agent loop on a real model, on CPU",
        "",
        f"{data['date']}, {data['machine']['cpu_count']} cores, load average "
        f"{data['machine']['load_average']}; `{data['command']}`.",
        f"Model: {data['model']['image']} behind the OpenAI-compatible backend. "
        f"{plan['turns']} turns a loop, every one a forced tool call; tool outputs of "
        f"{plan['output_chars']} characters; {plan['reps']} loops per variant, alternated.",
        "",
        f"The server measured **{server['prefill_tokens_per_s']} tokens/s of prefill** and "
        f"**{server['decode_tokens_per_s']} tokens/s of decode** (its own `timings`, "
        "over every turn with the prompt cache on).",
        "",
        "| variant | loop, s | model, s | of which prefill | decode | API overhead, ms | "
        "per turn, ms | first TTFT, ms | follow-up TTFT, ms | cached | loop vs legacy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, f in summary["variants"].items():
        lines.append(
            f"| {LABELS[variant]} | {f['loop_ms'] / 1000:.2f} | {f['model_ms'] / 1000:.2f} | "
            f"{f['prefill_ms'] / 1000:.2f} | {f['decode_ms'] / 1000:.2f} | "
            f"{f['overhead_ms']:.0f} | {f['overhead_per_turn_ms']:.1f} | "
            f"{f['first_ttft_ms']:.0f} | {f['followup_ttft_ms']:.0f} | "
            f"{f['followup_cached_share']:.0%} | {f.get('loop_vs_legacy', float('nan')):.3f} |"
        )
    for failure in data.get("failures", []):
        lines.append(
            f"- failed, not counted: {LABELS[failure['variant']]}, rep {failure['rep'] + 1}: "
            f"{failure['error'][:200]}"
        )
    lines += [
        "",
        "![Where a loop's time goes, and time to first token per turn](real-model.png)",
        "",
    ]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = summary["variants"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=110)
    names = list(variants)
    y = range(len(names))
    prefill = [variants[v]["prefill_ms"] / 1000 for v in names]
    decode = [variants[v]["decode_ms"] / 1000 for v in names]
    overhead = [variants[v]["overhead_ms"] / 1000 for v in names]
    left.barh(y, prefill, color="#1f77b4", label="prefill (server)")
    left.barh(y, decode, left=prefill, color="#aec7e8", label="decode (server)")
    left.barh(
        y, overhead, left=[p + d for p, d in zip(prefill, decode, strict=True)], color="#d62728",
        label="API overhead",
    )  # fmt: skip
    left.set_yticks(list(y), [LABELS[v] for v in names])
    left.invert_yaxis()
    left.set_xlabel("seconds per loop (median)")
    left.set_title("Where a loop's time goes")
    left.legend(loc="lower right", fontsize=8)
    for variant in (CONNECTION, COLD, LEGACY):
        if variant in variants:
            ttft = variants[variant]["per_turn"]["ttft_ms"]
            right.plot(range(1, len(ttft) + 1), ttft, marker="o", label=LABELS[variant])
    right.set_xlabel("turn")
    right.set_ylabel("time to first token, ms (median)")
    right.set_title("Time to first token, prompt cache on and off")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write(data: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(data)
    paths = [out / "real-model.json", out / "real-model.md", out / "real-model.png"]
    paths[0].write_text(json.dumps({**data, "summary": summary}, indent=1) + "\n")
    paths[1].write_text(markdown(data, summary))
    plot(summary, paths[2])
    return paths
