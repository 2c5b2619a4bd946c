"""Safety: full (whole conversation) vs incremental (new items only) classification,
against conversation size, in-process and over gRPC."""

from __future__ import annotations

import statistics
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
    sample,
    summarize,
)
from bench.services.history import (
    OUTPUT_CHARS,
    Conversation,
    conversation,
    history_tokens,
    tool_outputs,
)
from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.grpc_client import insecure_channel
from turnpike.safety.classifier import ProfanityClassifier
from turnpike.safety.engine import Mode, SafetyEngine
from turnpike.safety.policy import Thresholds
from turnpike.safety.state import ConversationStore
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc

NEEDS = ("safety",)
TURNS = (1, 5, 10, 20, 30, 40)
QUICK_TURNS = (1, 5, 10)
TENANT = "bench"


def new_turns(conv: Conversation, outputs: list[str]) -> list[list[Item]]:
    """Last turns like ``conv``'s, one per output, each with a tool output never sent before
    (the loop's own outputs, numbered so that no two are equal): what a live loop sends, a
    text the score cache cannot hold."""
    call = conv.last_turn[0]
    return [
        [
            call,
            Item(
                kind=Item.FUNCTION_CALL_OUTPUT,
                id=f"new_{n}",
                call_id=call.call_id,
                name=call.name,
                text=f"{text}\n(output {n}, after {len(conv.items)} items)\n",
            ),
        ]
        for n, text in enumerate(outputs)
    ]


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    engine = SafetyEngine(ProfanityClassifier(), Thresholds(), ConversationStore(1000))
    measurements = []
    # One new text per call: a warm-up call and at most max_n samples per point.
    outputs = tool_outputs(ctx.budget.max_n + 1, OUTPUT_CHARS)
    async with insecure_channel(ctx.addresses["safety"]) as channel:
        stub = safety_pb2_grpc.SafetyStub(channel)
        for turns in ctx.pick(TURNS, QUICK_TURNS):
            conv = conversation(turns)
            history = history_tokens(conv)
            conv_id = f"conv-{turns}"
            # Incremental calls need the conversation's state: seed it with one full pass.
            engine.classify(TENANT, conv_id, Mode.FULL, conv.items)
            full_req = safety_pb2.ClassifyRequest(
                tenant=TENANT, conversation_id=conv_id, mode=safety_pb2.FULL, items=conv.items
            )
            incr_req = safety_pb2.ClassifyRequest(
                tenant=TENANT,
                conversation_id=conv_id,
                mode=safety_pb2.INCREMENTAL,
                items=conv.last_turn,
            )
            full_fast, incr_fast = safety_pb2.ClassifyRequest(), safety_pb2.ClassifyRequest()
            full_fast.CopyFrom(full_req)
            incr_fast.CopyFrom(incr_req)
            full_fast.fast_path = incr_fast.fast_path = True
            await stub.Classify(full_req)
            fresh_grpc = iter(
                [
                    safety_pb2.ClassifyRequest(
                        tenant=TENANT,
                        conversation_id=conv_id,
                        mode=safety_pb2.INCREMENTAL,
                        fast_path=True,
                        items=items,
                    )
                    for items in new_turns(conv, outputs)
                ]
            )
            fresh = iter(new_turns(conv, outputs))
            points = await sample(
                {
                    # The fused model (sprint and connection pipelines): same scores.
                    ("full fast", "in-process"): lambda c=conv, k=conv_id: engine.record(
                        TENANT, k, Mode.FULL, engine.analyze(c.items, True)
                    ),
                    ("incremental fast", "in-process"): lambda c=conv, k=conv_id: engine.record(
                        TENANT, k, Mode.INCREMENTAL, engine.analyze(c.last_turn, True)
                    ),
                    # The same, a new tool output every time: scored, not found in the cache.
                    ("incremental fast new", "in-process"): lambda k=conv_id, f=fresh: (
                        engine.record(TENANT, k, Mode.INCREMENTAL, engine.analyze(next(f), True))
                    ),
                    ("full fast", "grpc"): lambda r=full_fast: stub.Classify(r),
                    ("incremental fast", "grpc"): lambda r=incr_fast: stub.Classify(r),
                    ("incremental fast new", "grpc"): lambda f=fresh_grpc: stub.Classify(next(f)),
                    ("full", "in-process"): lambda c=conv, k=conv_id: engine.classify(
                        TENANT, k, Mode.FULL, c.items
                    ),
                    ("incremental", "in-process"): lambda c=conv, k=conv_id: engine.classify(
                        TENANT, k, Mode.INCREMENTAL, c.last_turn
                    ),
                    ("full", "grpc"): lambda r=full_req: stub.Classify(r),
                    ("incremental", "grpc"): lambda r=incr_req: stub.Classify(r),
                },
                ctx.budget,
            )
            for (operation, transport), samples in points.items():
                items = conv.items if operation.startswith("full") else conv.last_turn
                latency = summarize(samples, 1000)
                measurements.append(
                    {
                        "operation": operation,
                        "transport": transport,
                        "turns": turns,
                        "history_tokens": history,
                        "items_scored": len(items),
                        "chars_scored": sum(len(i.text) + len(i.arguments) for i in items),
                        "latency_ms": latency,
                        "items_per_s": round(len(items) / (latency["median"] / 1000)),
                    }
                )
                log(
                    f"safety {operation:11} {transport:10} turns={turns:3} "
                    f"history={history:6} tokens: {ms(latency)} ms "
                    f"({len(items)} items)"
                )
    return _report(ctx, measurements, time.monotonic() - began)


def _report(ctx: Context, measurements: list[dict], duration: float) -> Report:
    derived: dict = {}
    for transport in ("in-process", "grpc"):
        key = transport.replace("-", "_")
        fast = pick(measurements, "incremental fast", transport)
        slow = pick(measurements, "incremental", transport)
        derived[f"incremental_fast_{key}_median_ms_largest_history"] = fast[-1]["latency_ms"][
            "median"
        ]
        new = pick(measurements, "incremental fast new", transport)
        derived[f"incremental_fast_new_text_{key}_median_ms"] = round(
            statistics.median(m["latency_ms"]["median"] for m in new), 4
        )
        derived[f"library_over_fused_incremental_{key}_at_largest"] = round(
            slow[-1]["latency_ms"]["median"] / fast[-1]["latency_ms"]["median"], 1
        )
        full_fast = pick(measurements, "full fast", transport)
        derived[f"full_fast_{key}_median_ms_at_largest"] = full_fast[-1]["latency_ms"]["median"]
        full = pick(measurements, "full", transport)
        (
            derived[f"full_{key}_ms_per_1k_history_tokens"],
            derived[f"full_{key}_fixed_ms"],
        ) = history_fit(full)
        derived[f"full_{key}_median_ms_at_largest"] = full[-1]["latency_ms"]["median"]
        derived[f"incremental_{key}_median_ms_smallest_history"] = slow[0]["latency_ms"]["median"]
        derived[f"incremental_{key}_median_ms_largest_history"] = slow[-1]["latency_ms"]["median"]
        derived[f"full_over_incremental_{key}_at_largest"] = round(
            full[-1]["latency_ms"]["median"] / slow[-1]["latency_ms"]["median"], 1
        )
    full_ip, full_g = pick(measurements, "full", "in-process"), pick(measurements, "full", "grpc")
    inc_ip = pick(measurements, "incremental", "in-process")
    inc_g = pick(measurements, "incremental", "grpc")
    headline = [
        f"Full classification, linear fit against the history: "
        f"{derived['full_in_process_ms_per_1k_history_tokens']:.2f} ms per 1k tokens "
        f"in-process, {derived['full_grpc_ms_per_1k_history_tokens']:.2f} over gRPC; "
        f"{full_ip[-1]['history_tokens']:,} tokens ({full_ip[-1]['items_scored']} items) take "
        f"{full_ip[-1]['latency_ms']['median']:.1f} ms in-process and "
        f"{full_g[-1]['latency_ms']['median']:.1f} ms over gRPC.",
        f"Incremental (the last turn only) against the history: "
        f"{inc_ip[0]['latency_ms']['median']:.2f} -> {inc_ip[-1]['latency_ms']['median']:.2f} ms "
        f"in-process and {inc_g[0]['latency_ms']['median']:.2f} -> "
        f"{inc_g[-1]['latency_ms']['median']:.2f} ms over gRPC; "
        f"{derived['full_over_incremental_grpc_at_largest']:g}x cheaper than full over gRPC at "
        "the largest size (the model call has a fixed cost of a few ms).",
        f"The fast path (sprint and connection pipelines: the fused model, the same scores, and "
        f"a score cache by content, warm here because the same texts are re-sent, as HTTP "
        f"follow-ups re-send their history) classifies the last turn in {derived['incremental_fast_in_process_median_ms_largest_history']:.2f} ms "
        f"in-process and {derived['incremental_fast_grpc_median_ms_largest_history']:.2f} ms over "
        f"gRPC ({derived['library_over_fused_incremental_grpc_at_largest']:g}x faster than the "
        f"library's path), and the whole {full_ip[-1]['history_tokens']:,}-token conversation in "
        f"{derived['full_fast_grpc_median_ms_at_largest']:.1f} ms over gRPC.",
        f"A live loop's turn brings a tool output never seen before, which the fast path "
        f"scores (a new text every call here): "
        f"{derived['incremental_fast_new_text_in_process_median_ms']:.2f} ms in-process and "
        f"{derived['incremental_fast_new_text_grpc_median_ms']:.2f} ms over gRPC (median over "
        "the history sizes, which do not matter to it).",
    ]
    rows = []
    for point in pick(measurements, "full", "in-process"):
        cells = cells_at(measurements, point["turns"])
        rows.append(
            [
                point["turns"],
                point["history_tokens"],
                point["items_scored"],
                ms(cells["full", "in-process"]["latency_ms"]),
                ms(cells["full", "grpc"]["latency_ms"]),
                ms(cells["incremental", "in-process"]["latency_ms"]),
                ms(cells["incremental", "grpc"]["latency_ms"]),
                ms(cells["full fast", "grpc"]["latency_ms"]),
                ms(cells["incremental fast", "grpc"]["latency_ms"]),
                ms(cells["incremental fast new", "grpc"]["latency_ms"]),
            ]
        )
    table = Table(
        "Classification latency in ms, median (p90)",
        [
            "turns",
            "history tokens",
            "items",
            "full in-proc",
            "full gRPC",
            "incremental in-proc",
            "incremental gRPC",
            "full fast gRPC",
            "incremental fast gRPC",
            "incremental fast gRPC, new text",
        ],
        rows,
        "Incremental scores only the last round's items (the model's call and the tool's "
        "output) and folds them into the kept state. The fast columns re-send texts the "
        "score cache holds, but for the last one, whose tool output is new every call.",
    )
    plot = "safety_latency.png"
    line_plot(
        ctx.out_dir / plot,
        "Safety: classification latency vs conversation size",
        "history tokens",
        "latency (ms, median)",
        latency_series(
            measurements,
            (
                ("full", "in-process", "o-"),
                ("full", "grpc", "s-"),
                ("incremental", "in-process", "o--"),
                ("incremental", "grpc", "s--"),
                ("full fast", "grpc", "^-"),
                ("incremental fast", "grpc", "^--"),
                ("incremental fast new", "grpc", "v--"),
            ),
        ),
    )
    return Report(
        service="safety",
        title="Safety: full vs incremental classification",
        summary=(
            "The same agent conversation as the tokenizer benchmark (the agent loop's). *Full* "
            "classifies every item (mode FULL), *incremental* only the last round's items on "
            "a conversation "
            "whose state is kept (mode INCREMENTAL). Each item's text is chunked and scored "
            "by the profanity model in one batch, and scanned for credentials. In-process "
            "calls `turnpike.safety.engine.SafetyEngine.classify`; gRPC calls a `python -m turnpike.safety` "
            "process on loopback, one request at a time."
        ),
        params={"turns": list(ctx.pick(TURNS, QUICK_TURNS)), "budget": vars(ctx.budget)},
        measurements=measurements,
        derived=derived,
        headline=headline,
        tables=[table],
        plots=[plot],
        duration_s=duration,
    )
