"""Per-conversation safety state, kept for incremental classification, bounded by LRU."""

from __future__ import annotations

from dataclasses import dataclass, field

from turnpike.lru import LruCache
from turnpike.safety.policy import Assessment, Verdict

# (tenant, conversation_id): a conversation id is only meaningful within its tenant.
StateKey = tuple[str, str]


@dataclass(frozen=True)
class ConversationState:
    """What the items scored so far amount to. Every field folds by max or sum, so the order
    and grouping of calls does not matter."""

    verdict: Verdict = Verdict.ALLOW
    max_score: float = 0.0
    items_seen: int = 0
    category_counts: dict[str, int] = field(default_factory=dict)

    def fold(self, assessment: Assessment, items: int) -> ConversationState:
        counts = dict(self.category_counts)
        for category, n in assessment.category_counts.items():
            counts[category] = counts.get(category, 0) + n
        return ConversationState(
            verdict=max(self.verdict, assessment.verdict),
            max_score=max(self.max_score, assessment.max_score),
            items_seen=self.items_seen + items,
            category_counts=counts,
        )


class ConversationStore:
    """At most ``max_conversations`` states; the least recently used is forgotten first (a
    forgotten conversation restarts empty on its next incremental call)."""

    def __init__(self, max_conversations: int) -> None:
        self._states: LruCache[StateKey, ConversationState] = LruCache(max_conversations)

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: StateKey) -> bool:
        return key in self._states

    def get(self, key: StateKey) -> ConversationState:
        return self._states.get(key) or ConversationState()

    def put(self, key: StateKey, state: ConversationState) -> None:
        self._states.put(key, state)
