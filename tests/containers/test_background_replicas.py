"""Background responses across two gateway replicas sharing a real Redis, through the
official SDK: a stream started on one is resumed on the other, and a response generated
by one is cancelled through the other."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from support.background import start_long_response, stream_then_drop

pytestmark = pytest.mark.stack


def clients(replicas, key="sk-turnpike-dev"):
    return [OpenAI(base_url=base, api_key=key, max_retries=0) for base in replicas]


def test_a_stream_started_on_one_replica_resumes_on_the_other(two_replicas):
    a, b = clients(two_replicas)
    first = stream_then_drop(a, "turnpike-sim-65", 100, 5)
    response_id = first[0].response.id
    rest = list(b.responses.retrieve(response_id, stream=True, starting_after=4))
    sequence = [e.sequence_number for e in first + rest]
    assert sequence == list(range(len(sequence)))
    assert rest[-1].type == "response.completed"
    assert b.responses.retrieve(response_id).status == "completed"
    with pytest.raises(openai.BadRequestError) as err:
        for _ in b.responses.retrieve(response_id, stream=True, starting_after=sequence[-1] + 1):
            pass
    assert err.value.body["param"] == "starting_after"
    (bob,) = clients(two_replicas[1:], "sk-test-bob")
    with pytest.raises(openai.NotFoundError):
        for _ in bob.responses.retrieve(response_id, stream=True, starting_after=0):
            pass


def test_a_response_generated_on_one_replica_is_cancelled_through_the_other(two_replicas):
    a, b = clients(two_replicas)
    created, _ = start_long_response(a, b)
    cancelled = b.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert 0 < cancelled.usage.output_tokens < 2000
    assert a.responses.retrieve(created.id).status == "cancelled"
