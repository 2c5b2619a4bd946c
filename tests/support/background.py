"""Helpers of the background-mode tests."""

from __future__ import annotations

import time

from openai import OpenAI


def start_long_response(creator: OpenAI, poller: OpenAI | None = None):
    """A background response of 2,000 tokens at 65 tokens/s on ``creator``, returned once
    ``poller`` (the creator by default) sees its message streaming: (created, polled)."""
    poller = poller or creator
    created = creator.responses.create(
        model="turnpike-sim-65",
        input="Write 2000 tokens about lighthouses",
        max_output_tokens=2000,
        background=True,
    )
    deadline = time.monotonic() + 10
    while not (polled := poller.responses.retrieve(created.id)).output:
        assert time.monotonic() < deadline, "the response never started its message"
        time.sleep(0.05)
    return created, polled


def stream_then_drop(client: OpenAI, model: str, tokens: int, events: int) -> list:
    """Start a streamed background response asking for about ``tokens`` tokens, read its
    first ``events`` events, then drop the connection (generation goes on)."""
    first: list = []
    with client.responses.create(
        model=model, input=f"Write {tokens} tokens", background=True, stream=True
    ) as stream:
        for event in stream:
            first.append(event)
            if len(first) == events:
                break
    return first
