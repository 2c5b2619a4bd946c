"""Conversations in a real Redis, through the official SDK: two gateway replicas share
them (created on one, continued and listed on the other), and a tenant still finds only
its own."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from support.sdk import message, response_usage

pytestmark = pytest.mark.stack


def test_replicas_share_conversations(two_replicas):
    a, b = (
        OpenAI(base_url=base, api_key="sk-turnpike-dev", max_retries=0) for base in two_replicas
    )
    conversation = a.conversations.create(items=[{"role": "user", "content": "Remember teal."}])
    first = b.responses.create(
        model="turnpike-sim", conversation=conversation.id, input="Which colour?"
    )
    second = a.responses.create(
        model="turnpike-sim", conversation=conversation.id, input="Once more?"
    )
    assert first.status == second.status == "completed"
    said, answered = response_usage(first).input_tokens, response_usage(first).output_tokens
    assert response_usage(second).input_tokens > said + answered
    items = list(b.conversations.items.list(conversation.id, order="asc"))
    roles = [message(item).role for item in items]
    assert roles == ["user", "user", "assistant", "user", "assistant"]
    assert items[-1].id == second.output[0].id

    bob = OpenAI(base_url=two_replicas[1], api_key="sk-test-bob", max_retries=0)
    for call in (
        lambda: bob.conversations.retrieve(conversation.id),
        lambda: bob.responses.create(
            model="turnpike-sim", conversation=conversation.id, input="Mine now?"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    a.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        b.conversations.retrieve(conversation.id)
