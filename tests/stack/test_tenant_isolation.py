"""Tenant isolation on every path where tenant data crosses, against the real stack: tenant
B (bob) can neither read, change nor learn anything of tenant A's (alice's) data.

Already covered elsewhere, not repeated here: GET, DELETE, input_items and continuing
another tenant's response over HTTP and WebSocket (test_api_errors), background responses,
their cancel and their event replay (test_background), conversations (test_conversations),
compaction and encrypted reasoning items (test_compaction, test_reasoning, sealing in
test_gateway_sealing), the safety service's per-conversation state (test_safety_service),
the billing ledger (test_billing_ledger), the TokenCache's keys (test_gateway_caches), the
worker's prefix cache (test_worker_simulator), the safety service's score cache
(test_safety_servicer), a self-hosted model server's cache salt (test_worker_chat_backends),
/v1/usage's pending_events (test_gateway_billing_outbox), what replicas share in Redis
(containers/test_tenant_isolation_redis) and the dashboard (test_gateway_dashboard).

Content-keyed caches are the subtle case: a hit tells the caller that someone sent the same
prompt before (fewer cached tokens billed, a faster first token or verdict). Every such
cache (the TokenCache, the workers' prefix caches, the safety service's score cache) is keyed
by tenant, so bob's identical prompt is a miss wherever alice's repeat is a hit.
"""

from __future__ import annotations

import time

import httpx
import pytest
from openai import NotFoundError, OpenAI
from support.metrics_page import scrape
from support.raw_calls import expect_error, post, send, until_terminal, ws
from support.sdk import response_usage, turnpike_fields

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"
# Long enough for several of the worker's 64-token prefix-cache blocks.
PROMPT = " ".join(f"Alice's private note {n}: the merger closes on day {n}." for n in range(40))


def client(stack, tenant: str) -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[tenant], max_retries=0)


def cached_tokens(response) -> int:
    return response.usage.input_tokens_details.cached_tokens


def token_cache_hits(stack) -> float:
    return scrape(stack.metrics["gateway"]).value(
        "turnpike_gateway_cache_lookups_total", cache="token", result="hit"
    )


def prefix_cache_hits(stack) -> float:
    return sum(
        scrape(stack.metrics[worker]).value(
            "turnpike_worker_prefix_cache_lookups_total", result="hit"
        )
        for worker in stack.workers
    )


def safety_cache_hits(stack) -> float:
    return scrape(stack.metrics["safety"]).value(
        "turnpike_safety_texts_scored_total", source="cache"
    )


def on_every_worker(stack, alice: OpenAI, prompt: str, **extra):
    """Alice's prompt sent until every worker holds it (a routing key per request), so
    wherever bob's request goes, a worker there holds her prompt: only the tenant tells
    them apart. The last response.

    New keys go to the least loaded worker, and the router counts a route's load for 10 s,
    weighted by its prompt: right after another test sent a huge prompt to one worker,
    every new key goes to the other until that load expires. Hence a deadline, not a count."""
    workers: set[str] = set()
    deadline = time.monotonic() + 45
    n = 0
    while time.monotonic() < deadline:
        n += 1
        response = alice.responses.create(
            model=MODEL, input=prompt, prompt_cache_key=f"warm-{n}", max_output_tokens=16, **extra
        )
        workers.add(turnpike_fields(response)["worker_id"])
        if workers == set(stack.workers):
            return response
    pytest.fail(f"alice's prompt reached only {sorted(workers)}")


def test_an_identical_prompt_of_another_tenant_never_hits_a_cache(stack):
    alice, bob = client(stack, "alice"), client(stack, "bob")
    first = on_every_worker(stack, alice, PROMPT)
    token_hits, prefix_hits = token_cache_hits(stack), prefix_cache_hits(stack)
    safety_hits = safety_cache_hits(stack)
    bobs = bob.responses.create(model=MODEL, input=PROMPT, max_output_tokens=16)
    # Nothing of alice's is found: not the rendered tokens, not the worker's blocks, not
    # the safety service's scores.
    assert cached_tokens(bobs) == 0
    assert token_cache_hits(stack) == token_hits
    assert prefix_cache_hits(stack) == prefix_hits
    assert safety_cache_hits(stack) == safety_hits
    assert response_usage(bobs).input_tokens == response_usage(first).input_tokens
    # Alice's own repeat hits all three.
    again = alice.responses.create(model=MODEL, input=PROMPT, max_output_tokens=16)
    assert cached_tokens(again) > 0
    assert token_cache_hits(stack) == token_hits + 1
    assert prefix_cache_hits(stack) == prefix_hits + 1
    assert safety_cache_hits(stack) == safety_hits + 1
    # And bob's own repeat finds his own.
    assert cached_tokens(bob.responses.create(model=MODEL, input=PROMPT, max_output_tokens=16))


def test_on_the_legacy_path_too_the_prefix_cache_is_per_tenant(stack):
    """The legacy pipeline reaches the worker through the imageres proxy, which passes the
    tenant on."""
    legacy = {"x-turnpike-pipeline": "legacy"}
    alice, bob = client(stack, "alice"), client(stack, "bob")
    prompt = "Legacy: " + PROMPT
    on_every_worker(stack, alice, prompt, extra_headers=legacy)
    bobs = bob.responses.create(
        model=MODEL, input=prompt, max_output_tokens=16, extra_headers=legacy
    )
    assert turnpike_fields(bobs)["pipeline"] == "legacy"
    assert cached_tokens(bobs) == 0
    again = alice.responses.create(
        model=MODEL, input=prompt, max_output_tokens=16, extra_headers=legacy
    )
    assert cached_tokens(again) > 0


def test_a_routing_key_of_another_tenant_is_its_own(stack):
    """prompt_cache_key is a routing key scoped by tenant: the same key from bob neither
    lands on alice's cache nor moves her conversation."""
    alice, bob = client(stack, "alice"), client(stack, "bob")
    key = "shared-looking-key"
    prompt = "Routed: " + PROMPT  # a prefix neither tenant sent before
    alices = alice.responses.create(
        model=MODEL, input=prompt, prompt_cache_key=key, max_output_tokens=16
    )
    bobs = bob.responses.create(
        model=MODEL, input=prompt, prompt_cache_key=key, max_output_tokens=16
    )
    assert cached_tokens(bobs) == 0
    again = alice.responses.create(
        model=MODEL, input=prompt, prompt_cache_key=key, max_output_tokens=16
    )
    assert turnpike_fields(again)["worker_id"] == turnpike_fields(alices)["worker_id"]
    assert cached_tokens(again) > 0


def test_counting_and_compacting_cannot_read_another_tenants_response(stack):
    rid = post(stack, {"model": MODEL, "input": "alice's secret plan"}, key="sk-test-alice")
    rid = rid.json()["id"]
    for path in ("/responses/input_tokens", "/responses/compact"):
        reply = post(
            stack,
            {"model": MODEL, "input": "x", "previous_response_id": rid},
            key="sk-test-bob",
            path=path,
        )
        error = expect_error(reply, reply.status_code)
        assert reply.status_code in (400, 404) and error["param"] == "previous_response_id"
        assert "secret plan" not in reply.text


def test_deleting_is_refused_and_changes_nothing_for_the_owner(stack):
    alice, bob = client(stack, "alice"), client(stack, "bob")
    created = alice.responses.create(model=MODEL, input="alice keeps this")
    with pytest.raises(NotFoundError):
        bob.responses.delete(created.id)
    assert alice.responses.retrieve(created.id).id == created.id
    follow_up = alice.responses.create(
        model=MODEL, input="and this", previous_response_id=created.id
    )
    assert follow_up.previous_response_id == created.id


def test_a_socket_of_another_tenant_cannot_continue_an_unstored_response(stack):
    """The connection cache is per connection: alice's store=false response lives on her
    socket only, so bob's socket does not find it (nor does the store)."""
    with ws(stack, key="sk-test-alice") as alice_sock, ws(stack, key="sk-test-bob") as bob_sock:
        send(alice_sock, model=MODEL, input="alice, unstored", store=False)
        rid = until_terminal(alice_sock)[-1]["response"]["id"]
        send(bob_sock, model=MODEL, input="x", previous_response_id=rid, store=False)
        [event] = until_terminal(bob_sock)
        assert event["error"]["code"] == "previous_response_not_found"
        # Still usable by alice on her socket.
        send(alice_sock, model=MODEL, input="go on", previous_response_id=rid, store=False)
        assert until_terminal(alice_sock)[-1]["type"] == "response.completed"


def usage_of(stack, key: str) -> dict:
    reply = httpx.get(
        f"{stack.base_url}/usage", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_usage_shows_the_callers_own_figures_only(stack):
    before = usage_of(stack, "sk-test-bob")
    client(stack, "alice").responses.create(model=MODEL, input="alice is billed")
    after = usage_of(stack, "sk-test-bob")
    assert after["tenant"] == "bob"
    # Alice's traffic moves none of bob's figures (pending_events: test_gateway_billing_outbox).
    figures = ("responses", "input_tokens", "cached_tokens", "output_tokens", "by_model")
    assert {k: after[k] for k in figures} == {k: before[k] for k in figures}
