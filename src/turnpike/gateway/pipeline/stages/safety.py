"""``safety``: block what the policy forbids; record what it flags."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from opentelemetry import trace

from turnpike.gateway.metrics import SAFETY_VERDICTS as VERDICTS
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.protocol.errors import content_blocked
from turnpike.safety.v1 import safety_pb2

log = logging.getLogger(__name__)

VERDICT_NAMES = {safety_pb2.ALLOW: "allow", safety_pb2.FLAG: "flag", safety_pb2.BLOCK: "block"}


@dataclass(frozen=True)
class Safety(Stage):
    name: ClassVar[str] = "safety"
    inputs: ClassVar[frozenset[str]] = frozenset({"ctx", "response_id", "parent", "conversation"})
    output: ClassVar[str] = "safety_flags"
    # Classify only the new items, folding them into the conversation's safety state
    # (when continuing from the connection cache; the whole history otherwise).
    incremental: bool = False
    # Score with the fused classifier (same scores, a fraction of the work).
    fast: bool = False

    async def run(self, p: Prepared, res: Resources) -> tuple[str, ...]:
        conversation = p.conversation
        assert conversation is not None
        incremental = self.incremental and p.parent is not None and p.parent.from_connection_cache
        request = safety_pb2.ClassifyRequest(
            tenant=p.ctx.tenant,
            conversation_id=conversation.conversation_id,
            mode=safety_pb2.INCREMENTAL if incremental else safety_pb2.FULL,
            fast_path=self.fast,
            items=conversation.new_items if incremental else conversation.items,
        )
        verdict = await res.backends.call("safety", res.backends.safety.Classify, request)
        span = trace.get_current_span()
        span.set_attribute("turnpike.safety.verdict", safety_pb2.Verdict.Name(verdict.verdict))
        span.set_attribute("turnpike.safety.items_scored", verdict.items_scored)
        categories = sorted({f.category for f in verdict.findings})
        VERDICTS.labels(p.ctx.pipeline, VERDICT_NAMES.get(verdict.verdict, "allow")).inc()
        if verdict.verdict == safety_pb2.BLOCK:
            raise content_blocked(categories or ["policy"])
        if verdict.verdict != safety_pb2.FLAG:
            return ()
        # Recorded, never silently dropped: on the trace, the log and the response.
        flags = tuple(categories or ["earlier_in_conversation"])
        span.set_attribute("turnpike.safety.flags", flags)
        log.info("response %s flagged: %s", p.response_id, ", ".join(flags))
        return flags
