"""``safety``: block what the policy forbids; record what it flags."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from opentelemetry import trace

from turnpike.gateway.metrics import SAFETY_VERDICTS as VERDICTS
from turnpike.gateway.metrics import SESSION_EXCHANGES
from turnpike.gateway.pipeline.prepared import Conversation, Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage, streams_of
from turnpike.gateway.protocol.errors import content_blocked
from turnpike.gateway.upstream.session_stream import StreamBroken
from turnpike.gateway.upstream.sessions import ConnectionStreams, refusal_error
from turnpike.safety.v1 import safety_pb2

log = logging.getLogger(__name__)

VERDICT_NAMES = {safety_pb2.ALLOW: "allow", safety_pb2.FLAG: "flag", safety_pb2.BLOCK: "block"}


@dataclass(frozen=True)
class Safety(Stage):
    name: ClassVar[str] = "safety"
    inputs: ClassVar[frozenset[str]] = frozenset({"ctx", "response_id", "parent", "conversation"})
    output: ClassVar[str] = "safety_flags"
    # Classify only the new items, folding them into the conversation's safety state, where
    # that state is known to end with the parent: on the connection's session stream, or
    # (without one) in the service's store when continuing from the connection cache. The
    # whole history otherwise.
    incremental: bool = False
    # Score with the fused classifier (same scores, a fraction of the work).
    fast: bool = False
    # Ask on the client connection's session stream (turnpike.gateway.upstream.sessions),
    # when it has one; by a call otherwise, or when the stream breaks.
    session: bool = False

    async def run(self, p: Prepared, res: Resources) -> tuple[str, ...]:
        conversation = p.conversation
        assert conversation is not None
        streams = streams_of(p, res) if self.session else None
        verdict = None
        if streams is not None:
            verdict = await self._on_stream(p, streams, conversation)
        if verdict is None:
            incremental = (
                self.incremental
                and streams is None  # a broken stream's state is gone: the whole history
                and p.parent is not None
                and p.parent.from_connection_cache
            )
            request = self._request(p, conversation, incremental)
            called: safety_pb2.ClassifyResponse = await res.backends.call(
                "safety", res.backends.safety.Classify, request
            )
            verdict = called
        return self._decide(p, verdict)

    def _request(
        self, p: Prepared, conversation: Conversation, incremental: bool
    ) -> safety_pb2.ClassifyRequest:
        return safety_pb2.ClassifyRequest(
            tenant=p.ctx.tenant,
            conversation_id=conversation.conversation_id,
            mode=safety_pb2.INCREMENTAL if incremental else safety_pb2.FULL,
            fast_path=self.fast,
            items=conversation.new_items if incremental else conversation.items,
        )

    async def _on_stream(
        self, p: Prepared, streams: ConnectionStreams, conversation: Conversation
    ) -> safety_pb2.ClassifyResponse | None:
        """The verdict from the session stream; None when it broke (ask by a call)."""
        parent_id = p.parent.state.response["id"] if p.parent is not None else None
        incremental = self.incremental and streams.safety_holds(
            conversation.conversation_id, parent_id
        )
        message = safety_pb2.ClassifySessionRequest(
            request=self._request(p, conversation, incremental)
        )
        try:
            answered = await streams.safety.exchange(message)
        except StreamBroken:
            SESSION_EXCHANGES.labels("safety", "broken").inc()
            return None
        reply = answered.reply
        if reply.HasField("refusal"):
            SESSION_EXCHANGES.labels("safety", "refused").inc()
            raise refusal_error("safety", reply.refusal)
        SESSION_EXCHANGES.labels("safety", "ok").inc()
        streams.safety_folded(conversation.conversation_id, p.response_id, answered.generation)
        return reply.response

    def _decide(self, p: Prepared, verdict: safety_pb2.ClassifyResponse) -> tuple[str, ...]:
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
