"""What a stage is, and how stages run: one at a time, or ``Concurrently``.

A stage is a small frozen dataclass whose fields are its variant
(``Safety(incremental=True, fast=True)``). It declares its data flow: the ``inputs`` it
reads from the request's ``Prepared`` state and the one ``output`` field it fills in
(the value ``run`` returns). ``applies`` skips a stage a request does not need (its
output stays None); ``check`` raises what the client must fix in the result.

A stage raises ``ApiError`` for anything the client must fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.sealed.sealing import Sealer
from turnpike.gateway.state.conversations import ConversationStore, InMemoryConversationStore
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.responses import ResponseStore
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.gateway.upstream.backends import Backends
from turnpike.gateway.upstream.pdf_pool import PdfPool
from turnpike.gateway.upstream.sessions import ConnectionStreams, Sessions
from turnpike.image_resolution import Limits


@dataclass(frozen=True)
class Resources:
    """What stages share across requests: backend clients, the store, the caches."""

    backends: Backends
    store: ResponseStore
    model_cache: ModelConfigCache
    token_cache: TokenCache
    image_limits: Limits
    # /v1/conversations: what a request's ``conversation`` names.
    conversations: ConversationStore = field(
        default_factory=lambda: InMemoryConversationStore(10_000)
    )
    # Seals and opens compaction items (the server key).
    sealer: Sealer = field(default_factory=Sealer.ephemeral)
    # Reads the text of input PDFs, in worker processes (started on the first PDF).
    pdf: PdfPool = field(default_factory=PdfPool)
    # Client connections' session streams to safety and the tokenizer; None: calls only.
    sessions: Sessions | None = None


def streams_of(p: Prepared, res: Resources) -> ConnectionStreams | None:
    """The session of the request's client connection: its WebSocket's, or its chain of
    HTTP turns' (by the conversation it continues); None without one."""
    if p.ctx.streams is not None:
        return p.ctx.streams
    if res.sessions is None or p.ctx.transport == "websocket" or p.conversation is None:
        return None
    return res.sessions.for_chain(p.ctx.tenant, p.conversation.conversation_id)


class Stage:
    """One step of preparation."""

    name: ClassVar[str]  # its key in ``stages_ms`` and its span (``stage.<name>``)
    inputs: ClassVar[frozenset[str]]  # the fields of ``Prepared`` it reads
    output: ClassVar[str]  # the field of ``Prepared`` it fills in

    def applies(self, p: Prepared) -> bool:
        """Whether the request needs this stage at all (a skipped stage is not timed)."""
        return True

    async def run(self, p: Prepared, res: Resources) -> Any:
        """The stage's output."""
        raise NotImplementedError

    def check(self, p: Prepared) -> None:
        """What the client must fix in the stage's result. Untimed, and only once every
        stage running beside it is done: a check never cancels another stage's own
        error (a safety block outranks an over-long prompt)."""

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (self,)

    async def perform(self, p: Prepared, res: Resources) -> None:
        """Run as a pipeline step of its own: timed, then checked."""
        if self.applies(p):
            await _timed(self, p, res)
            self.check(p)


async def _timed(stage: Stage, p: Prepared, res: Resources) -> None:
    with p.ctx.stage(stage.name):
        output = await stage.run(p, res)
    setattr(p, stage.output, output)


class Concurrently:
    """Stages independent of one another, run at the same time; all finish before
    the pipeline's next step. None reads what another writes (checked by the pipeline)."""

    def __init__(self, *stages: Stage) -> None:
        self.stages = stages

    def __repr__(self) -> str:
        return f"Concurrently{self.stages!r}"

    async def perform(self, p: Prepared, res: Resources) -> None:
        wanted = [stage for stage in self.stages if stage.applies(p)]
        failed: ApiError | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for stage in wanted:
                    group.create_task(_timed(stage, p, res))
        except* ApiError as group_failed:
            failed = group_failed.exceptions[0]  # type: ignore[assignment]
        if failed is not None:
            # An API error from any stage (a block, a bad image, a backend away) answers
            # the request. Raised here, not inside except*: there, Python before 3.11.4
            # (Debian's 3.11.2, the images') wraps it in an ExceptionGroup, a 500.
            raise failed
        for stage in wanted:
            stage.check(p)


# What a pipeline lists: a stage, or stages that run at the same time.
Step = Stage | Concurrently


def each_stage(steps: tuple[Step, ...]) -> Iterator[Stage]:
    """Every stage in order, concurrent ones in the order they are listed."""
    for step in steps:
        yield from step.stages
