"""The ML text classifier: a trained linear model over TF-IDF features (alt-profanity-check),
applied to short chunks of each text; a text's score is the max over its chunks.

Why short chunks: the model is a bag of words trained on short comments, so a phrase's weight is
divided by everything else in the chunk. One profane sentence inside 2,000 characters of code
scores about 0.3 (well under any threshold); inside 100-250 characters it often scores above
0.8. Chunks are whole lines or sentences packed to at least ``MIN_CHUNK_CHARS`` (a lone "sh" or
"Shut down." scores high on its own) and at most ``MAX_CHUNK_CHARS``. On a sample of ~470 files
(2.8 MB) of library code and documentation this flags one (a docstring "Shut down the
exporter." at 0.81), and about half of single profane sentences inserted into code or prose
reach the flag threshold of 0.8: a modest classifier, not a moderation system."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

MIN_CHUNK_CHARS = 100
MAX_CHUNK_CHARS = 256

# A line, or a sentence within a line, with its terminator.
_SEGMENT = re.compile(r"[^\n.!?]*(?:[.!?]+|\n|$)")
_WORD_CHAR = re.compile(r"[^\W\d_]")  # a letter: chunks without one carry nothing to score


@dataclass(frozen=True)
class Chunk:
    start: int  # character offset in the text
    text: str


@dataclass(frozen=True)
class TextScore:
    score: float  # max over the chunks, 0.0 for a text with nothing to score
    chunks: int
    worst: Chunk | None  # the chunk that gave the score (for findings' detail)


def _split_long(start: int, text: str, limit: int) -> list[Chunk]:
    """Pieces of at most ``limit`` characters, cut at whitespace when the second half of the
    window has some (so words stay whole)."""
    pieces: list[Chunk] = []
    pos = 0
    while len(text) - pos > limit:
        cut = max(text.rfind(sep, pos + limit // 2, pos + limit) for sep in (" ", "\t"))
        end = cut if cut > pos else pos + limit
        pieces.append(Chunk(start + pos, text[pos:end]))
        pos = end
    pieces.append(Chunk(start + pos, text[pos:]))
    return pieces


def chunk_text(
    text: str, min_chars: int = MIN_CHUNK_CHARS, max_chars: int = MAX_CHUNK_CHARS
) -> list[Chunk]:
    """Consecutive chunks covering ``text``: lines and sentences packed until a chunk holds at
    least ``min_chars``, longer runs split to at most ``max_chars``. A short tail joins the
    chunk before it. Chunks without a letter are dropped."""
    chunks: list[Chunk] = []
    pending_start, pending_end = 0, 0
    for match in _SEGMENT.finditer(text):
        if match.end() == match.start():
            continue
        pending_end = match.end()
        if pending_end - pending_start >= min_chars:
            chunks += _split_long(pending_start, text[pending_start:pending_end], max_chars)
            pending_start = pending_end
    if pending_end > pending_start:
        if chunks and chunks[-1].start + len(chunks[-1].text) == pending_start:
            last = chunks.pop()
            chunks.append(Chunk(last.start, last.text + text[pending_start:pending_end]))
        else:
            chunks.append(Chunk(pending_start, text[pending_start:pending_end]))
    return [chunk for chunk in chunks if _WORD_CHAR.search(chunk.text)]


class FusedCalibratedLinear:
    """The trained model's exact probabilities with far less per-call work.

    The shipped model is a TF-IDF vectorizer and a ``CalibratedClassifierCV``: five linear
    SVMs, each followed by a sigmoid calibration, averaged. scikit-learn builds a sparse
    matrix, validates it at every step and evaluates the estimators one at a time; here the
    vectorizer's own analyzer gives each text's terms, the idf weights are folded into the
    five stacked weight vectors, and a batch costs a few vectorised sums: a text's decision is
    ``counts @ (idf * coef) / ||counts * idf|| + intercept`` (the l2-normalised TF-IDF vector
    times the coefficients, rearranged). Tests check the scores agree with the library's to
    1e-9."""

    def __init__(self, vectorizer, model) -> None:
        import numpy as np

        members = model.calibrated_classifiers_
        if model.method != "sigmoid" or any(len(m.calibrators) != 1 for m in members):
            raise ValueError("only a binary, sigmoid-calibrated ensemble can be fused")
        tfidf = vectorizer.get_params()
        if (tfidf["analyzer"], tfidf["norm"], tfidf["use_idf"]) != ("word", "l2", True) or (
            tfidf["sublinear_tf"] or tfidf["binary"]
        ):
            raise ValueError("only word counts weighted by idf, l2-normalised, can be fused")
        self._np = np
        self._analyze = vectorizer.build_analyzer()  # the library's tokens (stop words dropped)
        self._vocabulary: dict[str, int] = vectorizer.vocabulary_
        idf = vectorizer.idf_
        coef = np.vstack([m.estimator.coef_.ravel() for m in members]).T  # (F, k)
        self._weights = coef * idf[:, None]
        self._idf_squared = idf * idf
        self._bias = np.array([float(m.estimator.intercept_[0]) for m in members])
        self._a = np.array([m.calibrators[0].a_ for m in members])
        self._b = np.array([m.calibrators[0].b_ for m in members])

    def __call__(self, texts: list[str]) -> Sequence[float]:
        np = self._np
        known = self._vocabulary.get
        rows: list[int] = []
        terms: list[int] = []  # every occurrence of a known term: (rows[i], terms[i])
        for row, text in enumerate(texts):
            found = [j for term in self._analyze(text) if (j := known(term)) is not None]
            terms += found
            rows += [row] * len(found)
        features = len(self._weights)
        cells, counts = np.unique(
            np.array(rows, dtype=np.intp) * features + np.array(terms, dtype=np.intp),
            return_counts=True,
        )
        row_of, term_of = np.divmod(cells, features)
        tf = counts.astype(np.float64)
        norm = np.sqrt(
            np.bincount(row_of, tf * tf * self._idf_squared[term_of], minlength=len(texts))
        )
        decision = np.zeros((len(texts), len(self._bias)))
        np.add.at(decision, row_of, tf[:, None] * self._weights[term_of])
        # A text without a known term stays a zero vector, as scikit-learn's normalize leaves it.
        decision /= np.where(norm > 0.0, norm, 1.0)[:, None]
        decision += self._bias
        positive = 1.0 / (1.0 + np.exp(self._a * decision + self._b))
        return positive.mean(axis=1)


class ProfanityClassifier:
    """Scores texts in [0, 1]. Thread-safe: the model is only read."""

    def __init__(
        self, min_chunk_chars: int = MIN_CHUNK_CHARS, max_chunk_chars: int = MAX_CHUNK_CHARS
    ) -> None:
        started = time.monotonic()
        # Imported here, not at module level, so the ~1-2 s model load happens when the
        # service builds its classifier, before it reports SERVING, and not in modules that
        # only need chunking.
        from profanity_check import predict_prob
        from profanity_check.profanity_check import model, vectorizer

        self._predict_prob: Callable[[list[str]], Sequence[float]] = predict_prob
        self._fused: Callable[[list[str]], Sequence[float]] = FusedCalibratedLinear(
            vectorizer, model
        )
        self._chunk_limits = (min_chunk_chars, max_chunk_chars)
        self._predict_prob(["warm up the vectorizer and the model"])
        self._fused(["warm up the fused model"])
        log.info("profanity classifier loaded in %.2fs", time.monotonic() - started)

    def score_texts(self, texts: Sequence[str], fast: bool = False) -> list[TextScore]:
        """One score per text; every chunk of every text goes to the model in one batch
        (a library model call has a fixed cost of several milliseconds). ``fast`` uses the
        fused model: the same scores."""
        per_text = [chunk_text(text, *self._chunk_limits) for text in texts]
        batch = [chunk.text for chunks in per_text for chunk in chunks]
        predict = self._fused if fast else self._predict_prob
        probs = iter(predict(batch)) if batch else iter(())
        scores: list[TextScore] = []
        for chunks in per_text:
            best, worst = 0.0, None
            for chunk in chunks:
                p = float(next(probs))
                if worst is None or p > best:
                    best, worst = p, chunk
            scores.append(TextScore(best, len(chunks), worst))
        return scores
