from __future__ import annotations

import hashlib
import random
from array import array

import pytest

from turnpike import token_bytes
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.block_keys import BlockKeys


def chained_keys(tokens: list[int], namespace: str, block_size: int) -> list[bytes]:
    """The definition, block by block from the namespace's hash."""
    key = hashlib.blake2b(namespace.encode(), digest_size=16).digest()
    keys = []
    for start in range(0, len(tokens) // block_size * block_size, block_size):
        block = array("I", tokens[start : start + block_size]).tobytes()
        key = hashlib.blake2b(key + block, digest_size=16).digest()
        keys.append(key)
    return keys


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(200_000) for _ in range(n)]


def test_keys_follow_the_definition() -> None:
    rng = random.Random(1)
    prompt = tokens(rng, 64 * 5 + 17)
    assert BlockKeys(64)(prompt, "m") == chained_keys(prompt, "m", 64)
    assert len(BlockKeys(64)(prompt, "m")) == 5
    assert BlockKeys(64)(prompt[:63], "m") == []


def test_follow_ups_reuse_the_previous_prompt_and_equal_the_full_computation() -> None:
    rng = random.Random(2)
    remembering, fresh = BlockKeys(64), BlockKeys(64, remembered=0)
    conversations = [tokens(rng, 500) for _ in range(3)]
    for _ in range(6):  # turns of three conversations, interleaved
        for prompt in conversations:
            prompt += tokens(rng, rng.randrange(1, 300))
            keys = remembering(prompt, "m")
            assert keys == fresh(prompt, "m") == chained_keys(prompt, "m", 64)
    assert len(remembering._recent) == 3  # one per conversation: each turn replaced its last


def test_a_reused_prefix_hashes_only_the_new_blocks(monkeypatch) -> None:
    keys = BlockKeys(64)
    prompt = list(range(64 * 10))
    keys(prompt, "m")
    follow_up = [*prompt, *range(10_000, 10_000 + 64 * 2 + 5)]
    expected = chained_keys(follow_up, "m", 64)
    hashed = []
    real = hashlib.blake2b

    def counting(*args, **kwargs):
        hashed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "blake2b", counting)
    assert keys(follow_up, "m") == expected
    assert len(hashed) == 2


@pytest.mark.parametrize(
    "second",
    [
        lambda p: p,  # the same prompt again
        lambda p: p[:200],  # a shorter one (an earlier turn)
        lambda p: [*p[:130], 7, *p[131:]],  # one token differs in block 3
        lambda p: [5, *p[1:]],  # the first token differs
        lambda p: [*p[:256], *range(9, 300)],  # a branch after block 4
    ],
)
def test_any_second_prompt_gets_the_keys_of_the_full_computation(second) -> None:
    rng = random.Random(3)
    first = tokens(rng, 64 * 8 + 3)
    keys = BlockKeys(64)
    keys(first, "m")
    other = second(first)
    assert keys(other, "m") == chained_keys(other, "m", 64)


def test_namespaces_never_share_keys() -> None:
    keys = BlockKeys(64)
    prompt = list(range(300))
    a = keys(prompt, "model-a")
    b = keys([*prompt, 1, 2, 3], "model-b")
    assert b == chained_keys([*prompt, 1, 2, 3], "model-b", 64)
    assert not set(a) & set(b)


def test_remembers_a_bounded_number_of_prompts() -> None:
    keys = BlockKeys(64, remembered=2)
    for start in range(0, 5000, 1000):
        keys(list(range(start, start + 128)), "m")
    assert len(keys._recent) == 2
    keys(list(range(64)), "m")  # no full block is not worth remembering
    assert len(keys._recent) == 2


def test_takes_the_tokens_of_a_request_as_they_arrive() -> None:
    prompt = list(range(1000, 1300))
    request = pb.GenerateRequest.FromString(
        pb.GenerateRequest(prompt=token_bytes.pack(prompt)).SerializeToString()
    )
    tokens = token_bytes.unpack(request.prompt)
    assert BlockKeys(64)(tokens, "m") == chained_keys(prompt, "m", 64)


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        BlockKeys(0)
    with pytest.raises(ValueError):
        BlockKeys(64, remembered=-1)
