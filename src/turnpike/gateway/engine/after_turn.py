"""What follows a response's generation, before its terminal event leaves: the response
stored, its rendered tokens and conversation state cached for the next turn, its usage
billed, the turn joined to its conversation, and its admission slot given back."""

from __future__ import annotations

import logging

from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.engine.background import BackgroundResponses
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.generation import Generation
from turnpike.gateway.engine.live_responses import LiveResponses
from turnpike.gateway.engine.timings import stamp_overhead
from turnpike.gateway.observability.tracing import end_response_span
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.protocol.errors import store_unavailable
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.items import Item, to_proto
from turnpike.gateway.state import conversation_bounds
from turnpike.gateway.state.conversation_state import ConversationState
from turnpike.gateway.state.responses import StoredResponse, StoreUnavailable
from turnpike.gateway.tenancy.admission import AdmissionControl
from turnpike.gateway.upstream.billing_outbox import BillingOutbox

log = logging.getLogger(__name__)


class AfterTurn:
    def __init__(
        self,
        res: Resources,
        outbox: BillingOutbox,
        admission: AdmissionControl | None,
        live: LiveResponses,
        background: BackgroundResponses,
    ) -> None:
        self.res = res
        self.outbox = outbox
        self.admission = admission
        self.live = live
        self.background = background

    async def store(self, prepared: Prepared) -> None:
        """The response as it stands, stored, unless it was deleted while it ran."""
        assert prepared.response is not None and prepared.conversation is not None
        if self.live.is_deleted(prepared.ctx.tenant, prepared.response_id):
            return
        await self.res.store.put(
            StoredResponse(
                prepared.ctx.tenant,
                prepared.response,
                prepared.request.input_items,
                prepared.conversation.affinity_key,
            )
        )

    async def finish(
        self,
        prepared: Prepared,
        events: ResponseEvents,
        generation: Generation,
        terminal: list[Event],
        queue: ResponseEventQueue,
    ) -> None:
        """Store, cache and bill before the terminal event leaves: a client that
        continues right after it must find its parent. A response the store could not
        keep ends failed (service_unavailable), never completed: a client must not continue
        from what the store does not hold. What was generated is billed either way."""
        response, ctx, request, policy = (
            prepared.response,
            prepared.ctx,
            prepared.request,
            prepared.policy,
        )
        assert response is not None and policy is not None
        use = response.get("usage") or {}  # what was generated, whatever the ending
        # Deleted while it ran: billed, but neither stored (store) nor continued from.
        deleted = self.live.is_deleted(ctx.tenant, response["id"])
        try:
            with ctx.stage("finalize"):
                finished_ok = response["status"] in ("completed", "incomplete")
                stored = True
                if request.store:
                    try:
                        await self.store(prepared)
                    except StoreUnavailable as err:
                        log.warning("storing response %s failed: %s", response["id"], err)
                        stored = False
                if response["usage"] and request.generate:
                    await self._bill(prepared)
                if finished_ok and not stored:
                    terminal[-1:] = events.failed(
                        "service_unavailable", store_unavailable().message
                    )
                    finished_ok = False
                continuable = finished_ok and not deleted
                cache = ctx.connection_cache
                # A truncated render covers only the items left: nothing may append to it.
                prompt = prepared.prompt
                whole = prompt is not None and not prompt.truncated
                if continuable and policy.keep_rendered_tokens and whole:
                    assert prompt is not None  # whole says so
                    self.res.token_cache.put(ctx.tenant, response["id"], prompt.rendered)
                if continuable and cache is not None:
                    cache.put(response["id"], next_state(prepared, generation))
                elif cache is not None and request.previous_response_id:
                    cache.evict_after_failure(request.previous_response_id, ctx.lane)
                if finished_ok and request.conversation:  # the turn joins its conversation
                    turn = [*request.input_items, *response["output"]]
                    # The output may take it past its bounds (turnpike.gateway.state.conversation_bounds).
                    await self.res.conversations.append(
                        ctx.tenant, request.conversation, turn, exempt=len(response["output"])
                    )
        except Exception:
            log.exception("finalizing response %s failed", response["id"])
        stamp_overhead(prepared, generation, terminal)
        await self.release(ctx, use.get("input_tokens", 0) + use.get("output_tokens", 0))
        end_response_span(ctx.span, response, ctx.stage_ms)
        queue.final = response
        for event in terminal:
            queue.emit(event)
        queue.close()
        self.background.finished(ctx.tenant, response["id"], response)
        self.live.finished(ctx.tenant, response["id"])

    async def release(self, ctx: RequestContext, used_tokens: int) -> None:
        """The response's admission slot given back, with the tokens it used."""
        if self.admission is not None:
            await self.admission.release(ctx.admission, used_tokens)

    async def _bill(self, prepared: Prepared) -> None:
        response, ctx, policy = prepared.response, prepared.ctx, prepared.policy
        assert response is not None and policy is not None
        use = response["usage"]
        event = billing_pb2.UsageEvent(
            event_id=response["id"],
            tenant=ctx.tenant,
            model=response["model"],
            input_tokens=use["input_tokens"],
            cached_tokens=use["input_tokens_details"]["cached_tokens"],
            output_tokens=use["output_tokens"],
            created_at=response["created_at"],
        )
        # Delivered later, billing links to the response's span.
        link = ctx.span.get_span_context()
        if policy.billing_before_terminal:
            await self.outbox.record_now(event, link)
        else:
            await self.outbox.submit(event, link)


def next_state(
    prepared: Prepared, generation: Generation, output: list[Item] | None = None
) -> ConversationState:
    """What a connection keeps of a finished response, to continue from it; or, given
    ``output`` (a rollout's step: turnpike.gateway.engine.rollout), of that step."""
    response, conversation, prompt = prepared.response, prepared.conversation, prepared.prompt
    assert response is not None and conversation is not None
    if output is None:
        output = response["output"]
    call_names = conversation.call_names
    return ConversationState(
        response=response,
        history=[*conversation.history, *prepared.request.input_items, *output],
        proto_history=conversation.items + to_proto(output, call_names),
        call_names=call_names,
        conversation_id=conversation.conversation_id,
        affinity_key=conversation.affinity_key,
        rendered=prompt.rendered if prompt is not None and not prompt.truncated else None,
        model=prepared.model,
        route=generation.route,
        lane=prepared.ctx.lane,
        image_tokens=prepared.image_tokens or 0,
        history_bytes=conversation_bounds.bytes_after(
            prepared.parent.state.history_bytes if prepared.parent is not None else 0,
            prepared.request.input_items,
            output,
        ),
    )
