"""Usage reaches the billing ledger exactly once per response, per tenant; stored
input items validate against the Open Responses item schema."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI
from support.openresponses import validate_input_item
from support.sdk import response_usage
from support.tools import READ_FILE_TOOL

pytestmark = pytest.mark.stack


def usage(stack, key):
    reply = httpx.get(
        f"{stack.base_url}/usage", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert reply.status_code == 200
    return reply.json()


def test_every_response_is_billed_once_to_its_tenant(stack):
    bob = stack.api_keys["bob"]
    alice_before = usage(stack, stack.api_keys["alice"])
    before = usage(stack, bob)
    client = OpenAI(base_url=stack.base_url, api_key=bob, max_retries=0)
    responses = [
        client.responses.create(model="turnpike-sim-4000", input=f"bill me {i}") for i in range(3)
    ]
    with client.responses.connect() as conn:
        conn.response.create(model="turnpike-sim-4000", input="bill me on a socket")
        for event in conn:
            if event.type == "response.completed":
                responses.append(event.response)
                break
    expected_in = sum(response_usage(r).input_tokens for r in responses)
    expected_out = sum(response_usage(r).output_tokens for r in responses)
    deadline = time.monotonic() + 15
    while True:
        after = usage(stack, bob)
        if (
            after["responses"] - before["responses"] >= len(responses)
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.1)
    assert after["tenant"] == "bob"
    assert after["responses"] - before["responses"] == len(responses)
    assert after["input_tokens"] - before["input_tokens"] == expected_in
    assert after["output_tokens"] - before["output_tokens"] == expected_out
    # Nothing of bob's leaked into alice's totals.
    assert usage(stack, stack.api_keys["alice"])["responses"] == alice_before["responses"]


def test_input_items_validate_against_the_item_schema(stack):
    client = OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0)
    tool = READ_FILE_TOOL
    first = client.responses.create(model="turnpike-sim-4000", input="Open main.py", tools=[tool])
    call = first.output[0]
    assert call.type == "function_call"
    second = client.responses.create(
        model="turnpike-sim-4000",
        previous_response_id=first.id,
        tools=[tool],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "print('hi')"}],
    )
    raw = httpx.get(
        f"{stack.base_url}/responses/{second.id}/input_items",
        params={"order": "asc"},
        headers={"Authorization": f"Bearer {stack.api_key}"},
    ).json()
    assert [item["type"] for item in raw["data"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    for item in raw["data"]:
        validate_input_item(item)
    assert raw["has_more"] is False and raw["first_id"] == raw["data"][0]["id"]
