"""Tokenizer: full render vs append, against conversation size, in-process and over gRPC."""

from __future__ import annotations

import time

from bench.services.common import (
    Context,
    Report,
    Table,
    cells_at,
    history_fit,
    latency_series,
    line_plot,
    log,
    ms,
    pick,
    rate,
    sample,
    summarize,
)
from bench.services.history import OUTPUT_CHARS, conversation
from turnpike.grpc_client import insecure_channel
from turnpike.tokenizer.render import Renderer
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc

NEEDS = ("tokenizer",)
TURNS = (1, 5, 10, 20, 30, 40)
QUICK_TURNS = (1, 5, 10)


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    renderer = Renderer()
    measurements = []
    async with insecure_channel(ctx.addresses["tokenizer"]) as channel:
        stub = tokenizer_pb2_grpc.TokenizerStub(channel)
        for turns in ctx.pick(TURNS, QUICK_TURNS):
            conv = conversation(turns)
            history = len(renderer.render(conv.instructions, conv.tools, conv.items))
            appended = len(renderer.render_append(conv.last_turn))
            full_req = tokenizer_pb2.RenderRequest(
                instructions=conv.instructions, tools=conv.tools, items=conv.items
            )
            append_req = tokenizer_pb2.RenderAppendRequest(items=conv.last_turn)
            points = await sample(
                {
                    ("full", "in-process"): lambda c=conv: renderer.render(
                        c.instructions, c.tools, c.items
                    ),
                    ("append", "in-process"): lambda c=conv: renderer.render_append(c.last_turn),
                    ("full", "grpc"): lambda r=full_req: stub.Render(r),
                    ("append", "grpc"): lambda r=append_req: stub.RenderAppend(r),
                },
                ctx.budget,
            )
            for (operation, transport), samples in points.items():
                tokens = history if operation == "full" else appended
                latency = summarize(samples, 1000)
                measurements.append(
                    {
                        "operation": operation,
                        "transport": transport,
                        "turns": turns,
                        "items": len(conv.items) if operation == "full" else len(conv.last_turn),
                        "history_tokens": history,
                        "tokens_rendered": tokens,
                        "latency_ms": latency,
                        "tokens_per_s": round(tokens / (latency["median"] / 1000)),
                    }
                )
                log(
                    f"tokenizer {operation:6} {transport:10} turns={turns:3} "
                    f"history={history:6} tokens: {ms(latency)} ms, "
                    f"{rate(measurements[-1]['tokens_per_s'])} tokens/s"
                )
    return _report(ctx, measurements, time.monotonic() - began)


def _report(ctx: Context, measurements: list[dict], duration: float) -> Report:
    derived: dict = {}
    for transport in ("in-process", "grpc"):
        full = pick(measurements, "full", transport)
        append = pick(measurements, "append", transport)
        key = transport.replace("-", "_")
        derived[f"full_{key}_ms_per_1k_tokens"], derived[f"full_{key}_fixed_ms"] = history_fit(full)
        derived[f"full_{key}_tokens_per_s_at_largest"] = full[-1]["tokens_per_s"]
        derived[f"append_{key}_median_ms_smallest_history"] = append[0]["latency_ms"]["median"]
        derived[f"append_{key}_median_ms_largest_history"] = append[-1]["latency_ms"]["median"]
        derived[f"full_over_append_{key}_at_largest"] = round(
            full[-1]["latency_ms"]["median"] / append[-1]["latency_ms"]["median"], 1
        )
    largest = pick(measurements, "full", "grpc")[-1]
    derived["grpc_overhead_ms_full_at_largest"] = round(
        largest["latency_ms"]["median"]
        - pick(measurements, "full", "in-process")[-1]["latency_ms"]["median"],
        3,
    )

    full_ip, full_g = pick(measurements, "full", "in-process"), pick(measurements, "full", "grpc")
    app_ip = pick(measurements, "append", "in-process")
    app_g = pick(measurements, "append", "grpc")
    headline = [
        f"Full render, linear fit against the history: "
        f"{derived['full_in_process_ms_per_1k_tokens']:.2f} ms per 1k tokens in-process, "
        f"{derived['full_grpc_ms_per_1k_tokens']:.2f} over gRPC; "
        f"{full_ip[-1]['history_tokens']:,} tokens take {full_ip[-1]['latency_ms']['median']:.1f} ms "
        f"in-process and {full_g[-1]['latency_ms']['median']:.1f} ms over gRPC "
        f"({rate(full_g[-1]['tokens_per_s'])} tokens/s).",
        f"Append (the last turn only) against the history: "
        f"{app_ip[0]['latency_ms']['median']:.2f} -> {app_ip[-1]['latency_ms']['median']:.2f} ms "
        f"in-process and {app_g[0]['latency_ms']['median']:.2f} -> "
        f"{app_g[-1]['latency_ms']['median']:.2f} ms over gRPC from "
        f"{app_g[0]['history_tokens']:,} to {app_g[-1]['history_tokens']:,} history tokens; "
        f"{derived['full_over_append_grpc_at_largest']:g}x cheaper than a full render over gRPC "
        "at the largest size.",
    ]

    rows = []
    by_turns = {m["turns"]: m for m in pick(measurements, "full", "in-process")}  # order of sizes
    for turns, point in by_turns.items():
        cells = cells_at(measurements, turns)
        rows.append(
            [
                turns,
                point["history_tokens"],
                ms(cells["full", "in-process"]["latency_ms"]),
                ms(cells["full", "grpc"]["latency_ms"]),
                ms(cells["append", "in-process"]["latency_ms"]),
                ms(cells["append", "grpc"]["latency_ms"]),
                rate(cells["full", "in-process"]["tokens_per_s"]),
                rate(cells["full", "grpc"]["tokens_per_s"]),
            ]
        )
    table = Table(
        "Latency in ms, median (p90), and full-render throughput in tokens/s",
        [
            "turns",
            "history tokens",
            "full in-proc",
            "full gRPC",
            "append in-proc",
            "append gRPC",
            "full tok/s in-proc",
            "full tok/s gRPC",
        ],
        rows,
        "Append renders only the last round's items (the model's function call and the "
        "tool's output: about 1,000 tokens).",
    )
    plot = "tokenizer_latency.png"
    line_plot(
        ctx.out_dir / plot,
        "Tokenizer: render latency vs conversation size",
        "history tokens",
        "latency (ms, median)",
        latency_series(
            measurements,
            (
                ("full", "in-process", "o-"),
                ("full", "grpc", "s-"),
                ("append", "in-process", "o--"),
                ("append", "grpc", "s--"),
            ),
        ),
    )
    return Report(
        service="tokenizer",
        title="Tokenizer: full render vs append",
        summary=(
            "Harmony rendering of the agent loop's conversation (`bench/loop/rollout.py`: "
            "instructions, 8 function tools, the task, then N rounds of the simulator's "
            f"function call, ~{OUTPUT_CHARS // 1000} KB of this repository's source as its "
            "output and a short user nudge). *Full* renders the whole conversation "
            "(`Render`), *append* only the last round's items (`RenderAppend`). "
            "In-process calls `turnpike.tokenizer.render.Renderer`; gRPC calls a `python -m turnpike.tokenizer` "
            "process on loopback, one request at a time (request protos built beforehand)."
        ),
        params={
            "turns": list(ctx.pick(TURNS, QUICK_TURNS)),
            "output_chars_per_turn": OUTPUT_CHARS,
            "budget": vars(ctx.budget),
        },
        measurements=measurements,
        derived=derived,
        headline=headline,
        tables=[table],
        plots=[plot],
        duration_s=duration,
    )
