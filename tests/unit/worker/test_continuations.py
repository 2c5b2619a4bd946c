"""A worker's kept requests (turnpike.worker.continuations): a continuation is rebuilt
whole from the request it names, once; anything else it names is unknown."""

from __future__ import annotations

import pytest

from turnpike import token_bytes
from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.continuations import Continuations, UnknownContinuation


def user(text: str) -> Item:
    return Item(kind=Item.MESSAGE, role="user", text=text)


def whole(request_id: str, texts: list[str], tokens: list[int], **fields) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=request_id,
        model="sim",
        tenant="acme",
        keep=True,
        items=[user(t) for t in texts],
        prompt=token_bytes.pack(tokens),
        **fields,
    )


def continuation(of: str, items: int, tokens: int, **fields) -> pb.GenerateRequest:
    request = whole("r2", ["c"], [7, 8, 9], **fields)
    request.continues, request.continued_items, request.continued_tokens = of, items, tokens
    return request


def test_a_continuation_is_rebuilt_whole_from_the_request_it_names() -> None:
    kept = Continuations(1 << 20)
    first = whole("r1", ["a", "b"], [1, 2, 3, 4, 99])  # 99: the completion prompt
    assert kept.resolve(first) is first  # a whole request is itself
    kept.keep(first)
    rebuilt = kept.resolve(continuation("r1", items=2, tokens=4))
    assert [i.text for i in rebuilt.items] == ["a", "b", "c"]
    assert token_bytes.unpack(rebuilt.prompt).tolist() == [1, 2, 3, 4, 7, 8, 9]
    assert not rebuilt.continues and not rebuilt.continued_items and not rebuilt.continued_tokens
    assert len(kept) == 0 and kept.bytes == 0  # taken out: a conversation keeps its newest
    with pytest.raises(UnknownContinuation):  # continued once
        kept.resolve(continuation("r1", items=2, tokens=4))
    kept.keep(rebuilt)
    assert len(kept) == 1 and kept.bytes == rebuilt.ByteSize()


@pytest.mark.parametrize(
    "named",
    [
        {"of": "r9", "items": 2, "tokens": 4},  # never kept here
        {"of": "r1", "items": 3, "tokens": 4},  # more items than it had
        {"of": "r1", "items": 2, "tokens": 6},  # more tokens than its prompt
        {"of": "r1", "items": 2, "tokens": 4, "tenant": "other"},  # another tenant's
        {"of": "r1", "items": 2, "tokens": 4, "model": "other-model"},
    ],
    ids=["unknown", "items", "tokens", "tenant", "model"],
)
def test_a_continuation_of_what_is_not_kept_as_it_says_is_unknown(named: dict) -> None:
    kept = Continuations(1 << 20)
    kept.keep(whole("r1", ["a", "b"], [1, 2, 3, 4, 99]))
    of, items, tokens = named.pop("of"), named.pop("items"), named.pop("tokens")
    request = continuation(of, items, tokens)
    for field, value in named.items():
        setattr(request, field, value)
    with pytest.raises(UnknownContinuation):
        kept.resolve(request)


def test_kept_requests_are_bounded_in_bytes() -> None:
    first = whole("r1", ["x" * 100], [1] * 50)
    kept = Continuations(first.ByteSize() * 2 + 10)
    for rid in ("r1", "r2", "r3"):
        kept.keep(whole(rid, ["x" * 100], [1] * 50))
    assert len(kept) == 2 and kept.bytes <= kept.max_bytes  # the least recent went first
    with pytest.raises(UnknownContinuation):
        kept.resolve(continuation("r1", items=1, tokens=50))
    not_marked = whole("r4", ["y"], [1])
    not_marked.keep = False
    kept.keep(not_marked)
    assert len(kept) == 2  # kept only when asked
    assert len(Continuations(0)) == 0
