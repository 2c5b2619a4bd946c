"""Classification of one request: items -> evidence (classifier + detectors) -> assessment ->
conversation state. ``analyze`` is the CPU work, in two steps: ``look_up`` (the score cache,
cheap) and ``complete`` (scoring what the cache did not hold; thread-safe), so a caller can
tell how much work is left before it decides where to run it. ``record`` touches the shared
state and runs on the event loop, so it needs no lock."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import cast

from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.lru import LruCache
from turnpike.safety import metrics
from turnpike.safety.classifier import ProfanityClassifier
from turnpike.safety.detectors import detect_credentials
from turnpike.safety.policy import (
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    MESSAGE_ROLES,
    Assessment,
    ItemEvidence,
    Thresholds,
    assess,
)
from turnpike.safety.state import ConversationState, ConversationStore


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


def _where(index: int, item: Item) -> str:
    return f"items[{index}]" + (f" (id {item.id!r})" if item.id else "")


def item_kind_and_text(index: int, item: Item) -> tuple[str, str]:
    if item.kind == Item.MESSAGE:
        if item.role not in MESSAGE_ROLES:
            raise InvalidRequest(
                f"{_where(index, item)}: unknown message role {item.role!r} "
                "(expected user, assistant, system or developer)"
            )
        return MESSAGE, item.text
    if item.kind == Item.FUNCTION_CALL:
        return FUNCTION_CALL, item.arguments
    if item.kind == Item.FUNCTION_CALL_OUTPUT:
        return FUNCTION_CALL_OUTPUT, item.text
    raise InvalidRequest(f"{_where(index, item)}: unknown item kind {item.kind}")


@dataclass
class Pending:
    """A request between ``SafetyEngine.look_up`` and ``complete``: its items, their kinds and
    texts, and the cache's entry for each text (None: still to be scored)."""

    items: Sequence[Item]
    kinds_texts: list[tuple[str, str]]
    fast: bool
    found: list[tuple | None]  # the cache's entries; ``complete`` fills in the rest
    keys: list[bytes]  # cache keys, on the fast path

    @property
    def missing(self) -> list[int]:
        return [i for i, entry in enumerate(self.found) if entry is None]

    @property
    def chars_to_score(self) -> int:
        return sum(len(self.kinds_texts[i][1]) for i in self.missing)


class ScoreCache:
    """Scores and detections of texts already analysed, by tenant and content hash (LRU,
    bounded).

    A conversation re-sent in full (HTTP follow-ups, stateless clients) is mostly text
    scored before: the fast path scores each distinct text once. Keyed by tenant too, so
    a verdict's speed never tells one tenant what another sent. Thread-safe, since
    ``SafetyEngine.complete`` may run in a worker thread."""

    def __init__(self, capacity: int) -> None:
        self._entries: LruCache[bytes, tuple] = LruCache(capacity)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(tenant: str, text: str) -> bytes:
        digest = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=16)
        digest.update(b"\0" + text.encode("utf-8", "surrogatepass"))
        return digest.digest()

    def get(self, key: bytes) -> tuple | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def put(self, key: bytes, entry: tuple) -> None:
        with self._lock:
            self._entries.put(key, entry)


class SafetyEngine:
    def __init__(
        self,
        classifier: ProfanityClassifier,
        thresholds: Thresholds,
        store: ConversationStore,
        cache_capacity: int = 50_000,
    ) -> None:
        self.classifier = classifier
        self.thresholds = thresholds
        self.store = store
        self.cache = ScoreCache(cache_capacity)

    @staticmethod
    def validate(items: Sequence[Item]) -> list[tuple[str, str]]:
        """Each item's kind and the text to score; InvalidRequest for a bad item."""
        return [item_kind_and_text(i, item) for i, item in enumerate(items)]

    def look_up(
        self,
        items: Sequence[Item],
        fast: bool = False,
        validated: list[tuple[str, str]] | None = None,
        tenant: str = "",
    ) -> Pending:
        """The first step of ``analyze``: each item's text, and on the fast path what the
        score cache holds for it (``tenant``'s entries only). Cheap (a hash per text);
        ``complete`` does the scoring."""
        kinds_texts = validated if validated is not None else self.validate(items)
        keys = [self.cache.key(tenant, text) for _, text in kinds_texts] if fast else []
        found: list[tuple | None] = (
            [self.cache.get(key) for key in keys] if fast else [None] * len(kinds_texts)
        )
        return Pending(items, kinds_texts, fast, found, keys)

    def complete(self, pending: Pending) -> list[ItemEvidence]:
        """The second step of ``analyze``: scores and detections of the texts not found in
        the cache, then every item's evidence. Thread-safe."""
        texts = [text for _, text in pending.kinds_texts]
        missing = pending.missing
        found = pending.found
        scores = self.classifier.score_texts([texts[i] for i in missing], pending.fast)
        observe = metrics.SCORES.observe
        by_model = 0
        for i, score in zip(missing, scores, strict=True):
            entry = (score, tuple(detect_credentials(texts[i])))
            found[i] = entry
            if pending.fast:
                self.cache.put(pending.keys[i], entry)
            if score.chunks:  # a text without chunks never reached the model
                observe(score.score)
                by_model += 1
        metrics.count_texts(by_model, len(missing) - by_model, len(found) - len(missing))
        filled = cast("list[tuple]", found)  # every text has its entry by now
        return [
            ItemEvidence(
                item_id=item.id,
                kind=pending.kinds_texts[i][0],
                role=item.role,
                score=entry[0],
                detections=entry[1],
            )
            for i, (item, entry) in enumerate(zip(pending.items, filled, strict=True))
        ]

    def analyze(
        self,
        items: Sequence[Item],
        fast: bool = False,
        validated: list[tuple[str, str]] | None = None,
        tenant: str = "",
    ) -> list[ItemEvidence]:
        """Evidence for every item. ``fast``: the fused model, and texts seen before are
        taken from the score cache (the same numbers: scoring is deterministic).
        ``validated``: what ``validate`` returned for these items, if the caller has it."""
        return self.complete(self.look_up(items, fast, validated, tenant))

    def record(
        self,
        tenant: str,
        conversation_id: str,
        mode: Mode,
        evidence: Sequence[ItemEvidence],
        store: ConversationStore | None = None,
    ) -> Outcome:
        """Fold ``evidence`` into the conversation's state, kept in ``store`` (a session
        stream's own), or in the service's shared store."""
        assessment = assess(evidence, self.thresholds)
        if mode is Mode.INCREMENTAL and not conversation_id:
            raise InvalidRequest("INCREMENTAL mode needs a conversation_id")
        store = self.store if store is None else store
        key = (tenant, conversation_id)
        previous = store.get(key) if mode is Mode.INCREMENTAL else ConversationState()
        state = previous.fold(assessment, len(evidence))
        if conversation_id:
            store.put(key, state)
        metrics.DECISION_OF[state.verdict].inc()
        return Outcome(state, assessment, len(evidence))

    def classify(
        self, tenant: str, conversation_id: str, mode: Mode, items: Sequence[Item]
    ) -> Outcome:
        """Both steps in one call (for callers that are not on an event loop)."""
        return self.record(tenant, conversation_id, mode, self.analyze(items, tenant=tenant))
