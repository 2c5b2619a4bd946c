"""The simulator's plain text (pure): seeded pseudo-text that mentions the words of the
user's question, as long as ``text.verbosity`` says, or as long as the user asked for
("in 2000 words", "500 tokens")."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from turnpike.worker.seeded import stable_rng
from turnpike.worker.user_text import content_words

MIN_TEXT_TOKENS, MAX_TEXT_TOKENS = 20, 60
# text.verbosity: the length of a plain answer, in tokens (low, high bounds).
VERBOSITY_TOKENS = {"low": (8, 20), "medium": (MIN_TEXT_TOKENS, MAX_TEXT_TOKENS), "high": (60, 150)}
MAX_REQUESTED_TOKENS = 32_768
_LENGTH_REQUEST = re.compile(r"\b(\d{1,6})\s*(?:words|tokens)\b", re.IGNORECASE)

_OPENERS = (
    "You asked about {topic}.",
    "Here is a short answer about {topic}.",
    "Good question about {topic}.",
    "Let me address {topic}.",
)
_GENERIC_OPENERS = (
    "Hello! This is the Turnpike simulator.",
    "Here is a short answer.",
    "Thanks for the message.",
)
_SENTENCES = (
    "In short, {w} depends mostly on the context you provide.",
    "The key point about {w} is that it is simpler than it first looks.",
    "Most people start with {w} and refine the details later.",
    "A careful look at {w} usually answers the question.",
    "There are a few ways to think about {w}, and each one has trade-offs.",
    "If you share more about {w}, I can give a more precise answer.",
    "This reply is simulated, so treat the details as placeholders.",
    "The simulator keeps answers short and deterministic.",
    "Every token here is paced at the configured model speed.",
    "That is the gist of it.",
)


def requested_length(user_text: str) -> int | None:
    """Tokens the user asked for ("in 2000 words"), if any."""
    match = _LENGTH_REQUEST.search(user_text)
    if match is None:
        return None
    return max(1, min(int(match.group(1)), MAX_REQUESTED_TOKENS))


def long_text(
    opening: str,
    words: list[str],
    target: int,
    rng: random.Random,
    count_tokens: Callable[[str], int],
) -> str:
    """Sentences until about ``target`` tokens, counted per sentence (a whole-text count
    on every step would be quadratic)."""
    parts, total = [opening], count_tokens(opening)
    while total < target:
        sentence = " " + rng.choice(_SENTENCES).format(w=rng.choice(words) if words else "this")
        parts.append(sentence)
        total += count_tokens(sentence)
    return "".join(parts)


def pseudo_text(
    user_text: str, seed: int, count_tokens: Callable[[str], int], verbosity: str = "medium"
) -> str:
    low, high = VERBOSITY_TOKENS[verbosity]
    words = content_words(user_text)
    rng = stable_rng(seed, "text", user_text)
    requested = requested_length(user_text)
    target = requested or rng.randint(low, high)
    if words:
        topic = " and ".join(words[:2]) if len(words) > 1 else words[0]
        text = rng.choice(_OPENERS).format(topic=topic)
    else:
        text = rng.choice(_GENERIC_OPENERS)
    if requested is not None and requested > high:
        return long_text(text, words, target, rng, count_tokens)
    used = {text}
    length = count_tokens(text)
    while length < target:
        sentence = rng.choice(_SENTENCES).format(w=rng.choice(words) if words else "this")
        if sentence in used and len(used) < len(_SENTENCES):
            continue
        candidate = text + " " + sentence
        candidate_length = count_tokens(candidate)  # counted once: the next length if kept
        if length >= low and candidate_length > high:
            break
        used.add(sentence)
        text, length = candidate, candidate_length
    return text
