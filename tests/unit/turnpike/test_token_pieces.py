"""Long text encoded in pieces (turnpike.token_pieces): exactly the tokens of the whole
text wherever the text has word boundaries, and bounded pieces where it has none."""

from __future__ import annotations

import random

import pytest

from turnpike.token_pieces import MAX_PIECE, encode_in_pieces, longest_word, pieces
from turnpike.vocab import harmony_encoding

ENCODING = harmony_encoding()
ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" \t\n\r\x0b\x0c.,;:!?'\"()[]{}<>/\\-_=+*&^%$#@~`|")
    + list("éüßçñ中文日本語한국어ЖЯ😀🎉\u00a0\u2028\u3000\x1c\u0301\u00bd")
)
SEPARATORS = [" ", " ", "\n", ", ", ". ", "", "\t", "  ", "'s ", ".\n", " \n\n", "/"]


def whole(text: str) -> list[int]:
    return ENCODING.encode(text, disallowed_special=())


def random_text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(map(len, words)) < size:
        word = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 14)))
        words.append(word + rng.choice(SEPARATORS))
    return "".join(words)


@pytest.mark.parametrize("seed", range(40))
def test_text_with_word_boundaries_encodes_to_exactly_the_whole_texts_tokens(seed: int) -> None:
    rng = random.Random(seed)
    text = random_text(rng, rng.randint(MAX_PIECE, 20 * MAX_PIECE))
    assert encode_in_pieces(whole, text) == whole(text)


def test_prose_and_code_encode_to_exactly_the_whole_texts_tokens() -> None:
    prose = "The quick brown fox, it's said, jumps over 1,234 lazy dogs.\n\n" * 200
    code = "def f(x):\n    return {'a': [x, x ** 2]}  # comment\n" * 200
    for text in (prose, code, prose + code):
        assert encode_in_pieces(whole, text) == whole(text)


@pytest.mark.parametrize("char", ["a", " ", ".", "\n", "\u00e9", "9"])
def test_one_repeated_character_is_cut_into_bounded_pieces(char: str) -> None:
    text = char * 200_000  # minutes as one word, under a second in pieces
    cut = pieces(text)
    assert "".join(cut) == text and max(map(len, cut)) <= MAX_PIECE
    assert encode_in_pieces(whole, text)


def test_short_text_is_one_piece() -> None:
    assert pieces("hello world") == ["hello world"]


def test_longest_word_measures_the_longest_stretch_without_a_cut_point() -> None:
    assert longest_word("") == 0
    assert longest_word("a" * 500) == 500
    assert longest_word("ab cd" + " " + "x" * 300 + ", y") == 301
    assert longest_word("The quick brown fox. " * 1000) < 10


def test_only_text_with_a_long_run_is_cut() -> None:
    from turnpike.token_pieces import MAX_PIECE, has_long_run

    assert not has_long_run("An ordinary sentence, with punctuation. " * 500)
    assert not has_long_run("word " * 10_000 + "\n\n" + "x" * (MAX_PIECE - 1))
    assert has_long_run("x" * MAX_PIECE)
    assert has_long_run("text " + " \n\t" * MAX_PIECE)  # mixed whitespace is one o200k word
    assert has_long_run("text" + "\u3000" * MAX_PIECE)  # Unicode whitespace counts too
    assert has_long_run("a" + "\u00e9" * MAX_PIECE)


def test_a_long_run_of_unicode_whitespace_is_encoded_in_pieces(monkeypatch) -> None:
    import turnpike.token_pieces as token_pieces

    seen: list[int] = []

    def encode(text: str) -> list[int]:
        seen.append(len(text))
        return [0] * len(text)

    token_pieces.encode_in_pieces(encode, "start" + "\u3000" * 100_000)
    assert max(seen) <= token_pieces.MAX_PIECE
    seen.clear()
    token_pieces.encode_in_pieces(encode, "An ordinary sentence. " * 1000)
    assert seen == [22_000]  # whole: nothing to cut
