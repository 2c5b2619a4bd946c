"""One response as the pipeline prepares it.

A request and its context go in. Each stage then fills in exactly one field below, its
``output``, from the fields it names as ``inputs`` (see ``turnpike.gateway.pipeline.stages``), so a
pipeline's list of stages states its data flow, and ``turnpike.gateway.pipeline.variants`` checks it
when a pipeline is built: a stage reads only what an earlier step wrote, and no field
has two writers. Once the stages are done, the engine adds the response object and the
pipeline's policy, and generates from the result.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, fields
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.state.conversation_state import ConversationState, RenderedPrefix
from turnpike.router.v1 import router_pb2


@dataclass(frozen=True)
class Parent:
    """The response a follow-up continues (``load_conversation``)."""

    state: ConversationState
    # Found in the connection-scoped cache: what earlier turns derived from the
    # conversation (safety state, rendered tokens, images, model, worker) is current.
    from_connection_cache: bool = False


@dataclass(frozen=True)
class Conversation:
    """The conversation a response is generated from (``validate_history``)."""

    history: list[Item]  # canonical items before this request's input
    call_names: dict[str, str]  # call id -> function name, the new items' calls included
    new_items: list[conversation_pb2.Item]  # this request's input, for the backends
    items: list[conversation_pb2.Item]  # the history, then the new items
    conversation_id: str  # the conversation's first response: keys its safety state
    affinity_key: str  # keys routing: a conversation stays where its prefix cache is


@dataclass(frozen=True)
class Prompt:
    """What the model generates from (``render``)."""

    rendered: RenderedPrefix  # the conversation's tokens, kept for the next turn
    tokens: array  # the same, then the tokens that open the assistant's turn
    # truncation "auto" dropped items to fit the context window: what the model sees
    # (the items left), the ids of those dropped, and the tokens before dropping.
    # ``rendered`` then covers only the items left: no later turn may append to it.
    kept_items: list[conversation_pb2.Item] | None = None
    dropped_ids: tuple[str, ...] = ()
    untruncated_tokens: int = 0
    # The prefix ``rendered`` continues (the parent's, appended to), if it was appended:
    # the worker may then be sent only what follows it (inference.proto, continues).
    base: RenderedPrefix | None = None

    @property
    def truncated(self) -> bool:
        return self.kept_items is not None


@dataclass(frozen=True)
class Policy:
    """What a pipeline decides beyond its stages; the engine follows it."""

    # Reach the worker through the image-resolution proxy, which resolves the images.
    worker_via_imageres: bool
    # Record billing before the terminal event (instead of in the background).
    billing_before_terminal: bool
    # Keep each response's rendered tokens in the process's TokenCache on finishing.
    keep_rendered_tokens: bool


@dataclass
class Prepared:
    # Given before any stage runs.
    request: CreateRequest
    ctx: RequestContext
    response_id: str
    # Stage outputs, each written by the one stage whose ``output`` names it; None until
    # that stage ran, or when it did not apply (no parent to load, nothing to generate).
    parent: Parent | None = None  # load_conversation
    conversation: Conversation | None = None  # validate_history
    model: router_pb2.ModelConfig | None = None  # resolve_model
    safety_flags: tuple[str, ...] | None = None  # safety: what it flagged (not blocked)
    image_tokens: int | None = None  # resolve_images: prompt tokens of the input images
    prompt: Prompt | None = None  # render
    route: router_pb2.RouteDecision | None = None  # route
    # Set by the engine once the stages are done.
    response: dict[str, Any] | None = None
    policy: Policy | None = None

    @property
    def input_tokens(self) -> int:
        """The prompt's tokens, its images' included (render must have run)."""
        assert self.prompt is not None
        return len(self.prompt.tokens) + (self.image_tokens or 0)


GIVEN = frozenset({"request", "ctx", "response_id"})
SET_BY_ENGINE = frozenset({"response", "policy"})
STAGE_OUTPUTS = frozenset(f.name for f in fields(Prepared)) - GIVEN - SET_BY_ENGINE
