"""The simulator's reasoning (pure): pseudo-text thought before the answer, as long as
``reasoning.effort`` asks, and its summary when one is asked for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from turnpike.conversation.v1 import conversation_pb2
from turnpike.worker.answer_kinds import AnswerError
from turnpike.worker.answers import last_user_text
from turnpike.worker.pseudo_text import long_text
from turnpike.worker.seeded import stable_rng
from turnpike.worker.user_text import content_words

# Reasoning (``reasoning.effort``): tokens of thought before the answer, a base times
# the effort's factor, deterministic per seed.
REASONING_BASE_TOKENS = 32
REASONING_FACTORS = {"minimal": 0.5, "low": 1, "medium": 2, "high": 4, "xhigh": 8}
_REASONING_OPENERS = (
    "The user asks about {topic}. Let me think about what matters here.",
    "We need to answer a question on {topic}. First, what is being asked?",
    "Question concerns {topic}. Let's work out the key points.",
)
_GENERIC_REASONING_OPENER = "We need to reply to the user. Let's consider what they want."


@dataclass(frozen=True)
class Reasoning:
    text: str
    summary: str  # "" when no summary was asked for


def plan_reasoning(
    items: Sequence[conversation_pb2.Item],
    effort: str,
    summary: str,
    seed: int,
    count_tokens: Callable[[str], int],
    instructions: str = "",
) -> Reasoning | None:
    """The reasoning before the answer, or None when no effort is asked for."""
    if not effort or effort == "none":
        return None
    factor = REASONING_FACTORS.get(effort)
    if factor is None:
        raise AnswerError(f"reasoning.effort '{effort}' is not one of {sorted(REASONING_FACTORS)}")
    user_text = last_user_text(items) or instructions
    words = content_words(user_text)
    rng = stable_rng(seed, "reasoning", effort, user_text)
    if words:
        topic = " and ".join(words[:2]) if len(words) > 1 else words[0]
        opening = rng.choice(_REASONING_OPENERS).format(topic=topic)
    else:
        topic, opening = "the request", _GENERIC_REASONING_OPENER
    text = long_text(opening, words, int(REASONING_BASE_TOKENS * factor), rng, count_tokens)
    brief = ""
    if summary:
        sentences = 2 if summary == "detailed" else 1
        body = " ".join(text.split(". ")[:sentences]).rstrip(".") + "."
        brief = f"**Considering {topic}**\n\n{body}"
    return Reasoning(text, brief)
