"""gRPC adapter over the safety engine. Scoring runs on worker threads; the conversation
state is only touched on the event loop. ``Classify`` keeps incremental state in the
service's shared store; ``ClassifySession`` answers the same questions on a client
connection's stream and keeps that connection's state in a store of the stream's own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from turnpike.safety.engine import InvalidRequest, Mode, SafetyEngine
from turnpike.safety.policy import ItemEvidence, Verdict
from turnpike.safety.state import ConversationStore
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc
from turnpike.session.v1 import session_pb2
from turnpike.session_server import Refused, SessionLimit, serve_session

log = logging.getLogger(__name__)

# Up to this much text still to score, fast-path scoring runs on the event loop (see _evidence).
INLINE_TEXT_CHARS = 16_384
# Up to this much text in all, the fast path looks the texts up in the score cache on the event
# loop (hashing takes about 2 ms per million characters).
LOOK_UP_INLINE_CHARS = 1 << 20

_MODES = {safety_pb2.FULL: Mode.FULL, safety_pb2.INCREMENTAL: Mode.INCREMENTAL}
_VERDICTS = {
    Verdict.ALLOW: safety_pb2.ALLOW,
    Verdict.FLAG: safety_pb2.FLAG,
    Verdict.BLOCK: safety_pb2.BLOCK,
}


SERVICE = "turnpike.safety.v1.Safety"
# Conversations whose state one session stream keeps (a WebSocket has at most 32 lanes
# at once; a connection that starts more conversations forgets the least recent first).
SESSION_CONVERSATIONS = 64


class SafetyServicer(safety_pb2_grpc.SafetyServicer):
    def __init__(self, engine: SafetyEngine, sessions: SessionLimit | None = None) -> None:
        self._engine = engine
        self._sessions = sessions or SessionLimit(4096)

    async def _evidence(
        self, request: safety_pb2.ClassifyRequest, validated: list[tuple[str, str]]
    ) -> list[ItemEvidence]:
        """The request's evidence, scored on the event loop when that is short: on the fast
        path a few kilobytes of new text take well under a millisecond, less than a thread hop
        costs. Texts found in the score cache cost nothing, so a re-sent history stays here
        too. Large new inputs, the library's model (a fixed cost of milliseconds) and huge
        requests go to a worker thread."""
        engine = self._engine
        if not request.fast_path or sum(len(t) for _, t in validated) > LOOK_UP_INLINE_CHARS:
            return await asyncio.to_thread(
                engine.analyze, request.items, request.fast_path, validated, request.tenant
            )
        pending = engine.look_up(request.items, True, validated, request.tenant)
        if pending.chars_to_score <= INLINE_TEXT_CHARS:
            return engine.complete(pending)
        return await asyncio.to_thread(engine.complete, pending)

    async def _classify(
        self, request: safety_pb2.ClassifyRequest, store: ConversationStore | None = None
    ) -> safety_pb2.ClassifyResponse:
        """The answer to one request (InvalidRequest for one that cannot be classified);
        its INCREMENTAL state kept in ``store``, or in the service's shared one."""
        mode = _MODES.get(request.mode)
        if mode is None:
            raise InvalidRequest("mode must be FULL or INCREMENTAL")
        if mode is Mode.INCREMENTAL and not request.conversation_id:
            raise InvalidRequest("INCREMENTAL mode needs a conversation_id")
        # Reject bad items before spending a worker thread on the good ones.
        validated = self._engine.validate(request.items)
        evidence = await self._evidence(request, validated)
        outcome = self._engine.record(
            request.tenant, request.conversation_id, mode, evidence, store
        )
        if outcome.assessment.verdict is Verdict.BLOCK:
            log.info(
                "blocked: tenant=%s conversation=%s categories=%s",
                request.tenant,
                request.conversation_id,
                sorted(outcome.assessment.category_counts),
            )
        return safety_pb2.ClassifyResponse(
            verdict=_VERDICTS[outcome.state.verdict],
            findings=[
                safety_pb2.Finding(
                    category=f.category, score=f.score, item_id=f.item_id, detail=f.detail
                )
                for f in outcome.assessment.findings
            ],
            max_score=outcome.state.max_score,
            items_scored=outcome.items_scored,
            items_seen=outcome.state.items_seen,
        )

    async def Classify(
        self, request: safety_pb2.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> safety_pb2.ClassifyResponse:
        try:
            return await self._classify(request)
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # unreachable: abort raises

    async def ClassifySession(
        self,
        requests: AsyncIterator[safety_pb2.ClassifySessionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[safety_pb2.ClassifySessionReply]:
        store = ConversationStore(SESSION_CONVERSATIONS)  # the connection's, gone with it

        async def answer(
            request: safety_pb2.ClassifySessionRequest,
        ) -> safety_pb2.ClassifySessionReply:
            try:
                response = await self._classify(request.request, store)
            except InvalidRequest as exc:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            return safety_pb2.ClassifySessionReply(seq=request.seq, response=response)

        def refused(seq: int, refusal: session_pb2.Refusal) -> safety_pb2.ClassifySessionReply:
            return safety_pb2.ClassifySessionReply(seq=seq, refusal=refusal)

        async for reply in serve_session(
            requests, context, self._sessions, SERVICE, "ClassifySession", answer, refused
        ):
            yield reply
