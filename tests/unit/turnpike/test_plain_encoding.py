"""Plain text is encoded by tiktoken (turnpike.vocab.plain_encoding) where harmony used to
encode it: the tokens must be harmony's own, for every kind of text a conversation holds."""

from __future__ import annotations

import pytest

from turnpike.vocab import harmony_encoding, plain_encoding

TEXTS = [
    "",
    "Hello, world!",
    "def handler(request):\n    return {'ok': True}  # ends here\n\n\n",
    "Spelled specials stay text: <|end|> <|start|>assistant<|message|> <|endoftext|>",
    "Ünïcödé, 中文, العربية, emoji 🚀🤖 and\u3000ideographic space",
    "tabs\tand\r\nwindows lines\x0b\x0c and trailing spaces   ",
    '{"path": "src/x.py", "lines": [1, 2, 3], "nested": {"a": null}}',
    "a" * 200 + " " + "ab" * 50,
    "12345678901234567890 3.14159 -42 0x1F",
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_plain_text_encodes_as_harmony_encodes_it(text: str) -> None:
    expected = harmony_encoding().encode(text, allowed_special=set(), disallowed_special=())
    assert plain_encoding().encode_ordinary(text) == expected
    assert plain_encoding().decode(expected) == harmony_encoding().decode(expected)
