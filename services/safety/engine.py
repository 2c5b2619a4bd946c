"""Classification of one request: items -> evidence (classifier + detectors) -> assessment ->
conversation state. ``analyze`` is the CPU work and is thread-safe; ``record`` touches the
shared state and runs on the event loop, so it needs no lock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from turnpike.conversation.v1.conversation_pb2 import Item

from safety.classifier import ProfanityClassifier
from safety.detectors import detect_credentials
from safety.policy import (
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    MESSAGE_ROLES,
    Assessment,
    ItemEvidence,
    Thresholds,
    assess,
)
from safety.state import ConversationState, ConversationStore


class Mode(Enum):
    FULL = "full"  # score every item given; the conversation's state is replaced
    INCREMENTAL = "incremental"  # score the items given and fold them into the kept state


class InvalidRequest(ValueError):
    """The request cannot be classified; the message says why."""


@dataclass(frozen=True)
class Outcome:
    state: ConversationState  # the whole conversation, after this call
    assessment: Assessment  # this call's items only
    items_scored: int


def item_kind_and_text(index: int, item: Item) -> tuple[str, str]:
    where = f"items[{index}]" + (f" (id {item.id!r})" if item.id else "")
    if item.kind == Item.MESSAGE:
        if item.role not in MESSAGE_ROLES:
            raise InvalidRequest(
                f"{where}: unknown message role {item.role!r} "
                "(expected user, assistant, system or developer)"
            )
        return MESSAGE, item.text
    if item.kind == Item.FUNCTION_CALL:
        return FUNCTION_CALL, item.arguments
    if item.kind == Item.FUNCTION_CALL_OUTPUT:
        return FUNCTION_CALL_OUTPUT, item.text
    raise InvalidRequest(f"{where}: unknown item kind {item.kind}")


class SafetyEngine:
    def __init__(
        self, classifier: ProfanityClassifier, thresholds: Thresholds, store: ConversationStore
    ) -> None:
        self.classifier = classifier
        self.thresholds = thresholds
        self.store = store

    @staticmethod
    def validate(items: Sequence[Item]) -> None:
        for i, item in enumerate(items):
            item_kind_and_text(i, item)

    def analyze(self, items: Sequence[Item], fast: bool = False) -> list[ItemEvidence]:
        kinds_and_texts = [item_kind_and_text(i, item) for i, item in enumerate(items)]
        scores = self.classifier.score_texts([text for _, text in kinds_and_texts], fast)
        return [
            ItemEvidence(
                item_id=item.id,
                kind=kind,
                role=item.role,
                score=score,
                detections=tuple(detect_credentials(text)),
            )
            for item, (kind, text), score in zip(items, kinds_and_texts, scores, strict=True)
        ]

    def record(
        self, tenant: str, conversation_id: str, mode: Mode, evidence: Sequence[ItemEvidence]
    ) -> Outcome:
        assessment = assess(evidence, self.thresholds)
        if mode is Mode.INCREMENTAL and not conversation_id:
            raise InvalidRequest("INCREMENTAL mode needs a conversation_id")
        key = (tenant, conversation_id)
        previous = self.store.get(key) if mode is Mode.INCREMENTAL else ConversationState()
        state = previous.fold(assessment, len(evidence))
        if conversation_id:
            self.store.put(key, state)
        return Outcome(state, assessment, len(evidence))

    def classify(
        self, tenant: str, conversation_id: str, mode: Mode, items: Sequence[Item]
    ) -> Outcome:
        """Both steps in one call (for callers that are not on an event loop)."""
        return self.record(tenant, conversation_id, mode, self.analyze(items))
