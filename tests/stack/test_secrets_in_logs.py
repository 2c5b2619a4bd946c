"""Secrets never reach a log, a trace or an error message.

A stack of its own runs as processes with every service logging at DEBUG (the libraries'
own debug lines included) and exporting every span to a receiver in this test. Requests
carry secrets of every kind the stack handles: a tenant's valid API key, wrong keys (over
HTTP and at the WebSocket upgrade), the keys the worker calls its model servers with (fakes
of Cerebras' API and of vLLM's here, which at one point quote the wrong key they are sent,
as some servers do), the server key that seals compaction items, and credentials in prompts that the safety detectors find (an AWS access key,
a GitHub token, a private key: flagged, or blocked). Then every process's output and every
exported span (names, attributes, events, status messages) are searched for each secret.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.responses import ResponseInputItemParam
from support.chat_completions_fake import VLLM, ChatCompletionsFake
from support.otlp_receiver import Receiver, Span, exporter_env
from support.sdk import as_input, sent_back
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from turnpike.devstack import LocalStack, StackConfig, StackError

TENANT_KEY = "sk-tenant-5c1f0e9a7b3d4e6f8a2c4b6d"
WRONG_KEY = "sk-wrong-8e2d4c6a0f1b3d5e7a9c1e3f"
WRONG_WS_KEY = "sk-wrong-ws-3a5c7e9b1d2f4a6c8e0b"
CEREBRAS_KEY = "csk-backend-9d7b5f3e1c0a8e6d4b2f"
COMPAT_KEY = "sk-selfhosted-6b4d2f0e8c6a4e2d0b9f"
SERVER_KEY = base64.b64encode(bytes(range(100, 132))).decode()  # seals compaction items
AWS_KEY_ID = "AKIAQ7XKZ3M2TPLW4R6N"
AWS_SECRET = "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"
GITHUB_TOKEN = "ghp_Z4x8Qm2Kd7Rt1Vb6Np3Lc9Hs5Wy0Fj8Ge2Ua"
PRIVATE_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7kX9q2Lm4Tz8Yw"
PRIVATE_KEY = (
    "-----BEGIN PRIVATE KEY-----\n"
    f"{PRIVATE_KEY_BODY}\n"
    "Vb3Rn6Jp1Xs5Kd9Mc2Qf7Hw4Lt8Za0Ye3Ub6Ni1Og5Pk\n"
    "-----END PRIVATE KEY-----"
)
SECRETS = {
    "the tenant's API key": TENANT_KEY,
    "a wrong API key": WRONG_KEY,
    "a wrong key at the WebSocket upgrade": WRONG_WS_KEY,
    "the Cerebras API key": CEREBRAS_KEY,
    "the OpenAI-compatible server's API key": COMPAT_KEY,
    "the server key": SERVER_KEY,
    "an AWS access key id": AWS_KEY_ID,
    "an AWS secret access key": AWS_SECRET,
    "a GitHub token": GITHUB_TOKEN,
    "a private key": PRIVATE_KEY_BODY,
}
LEAKY_PROMPT = (
    f"My .env has AWS_ACCESS_KEY_ID={AWS_KEY_ID} and AWS_SECRET_ACCESS_KEY={AWS_SECRET}, "
    f"and GITHUB_TOKEN={GITHUB_TOKEN}. Why does the deploy fail?"
)
CEREBRAS_MODEL = "fake-text"  # the fake's scenario, served by the worker's Cerebras backend


@dataclass
class Run:
    """What the secret-laden traffic left behind."""

    # Left out of a failure's report, which would print the secrets again.
    logs: dict[str, str] = field(repr=False)  # process -> its stdout and stderr
    spans: list[Span] = field(repr=False)
    replies: list[str] = field(repr=False)  # the errors and events the clients got
    verdicts: list[str] = field(repr=False)  # the safety flags and block messages


def models_file(folder: Path) -> Path:
    """The default models and one on the Cerebras backend (the fake's scenario)."""
    from turnpike.router.registry import DEFAULT_MODELS_FILE

    models = json.loads(DEFAULT_MODELS_FILE.read_text())
    cerebras = next(m for m in models["models"] if m["backend"] == "cerebras")
    models["models"].append({**cerebras, "id": CEREBRAS_MODEL, "created": 1767225601})
    path = folder / "models.json"
    path.write_text(json.dumps(models))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp("secrets-stack")
    receiver = Receiver(wait_s=15.0)
    port = receiver.start("127.0.0.1")
    fake = ChatCompletionsFake(api_key=CEREBRAS_KEY).start()
    compat = ChatCompletionsFake(api_key=COMPAT_KEY, flavour=VLLM).start()
    config = StackConfig.private(
        folder,
        workers=1,
        extra_env={
            "TURNPIKE_LOG_LEVEL": "DEBUG",
            "TURNPIKE_API_KEYS": f"{TENANT_KEY}:acme",
            "CEREBRAS_API_KEY": CEREBRAS_KEY,
            "CEREBRAS_BASE_URL": fake.base_url,
            "TURNPIKE_MODELS_FILE": str(models_file(folder)),
            "TURNPIKE_OPENAI_COMPAT_BASE_URL": f"{compat.base_url}/v1",
            "TURNPIKE_OPENAI_COMPAT_API_KEY": COMPAT_KEY,
            "TURNPIKE_OPENAI_COMPAT_MODEL": "fake-text",
            "TURNPIKE_SERVER_KEY": SERVER_KEY,
            **exporter_env(port),
        },
    )
    stack = LocalStack(config)
    try:
        stack.start()
    except StackError as exc:
        receiver.stop()
        fake.stop()
        compat.stop()
        pytest.fail(f"the stack did not start: {exc}", pytrace=False)
    replies: list[str] = []
    verdicts: list[str] = []
    try:
        send_secrets(stack, fake, replies, verdicts)
        send_to_self_hosted(stack, compat, replies)
    finally:
        stack.stop()  # every process flushes its spans and its output as it stops
        receiver.stop()
        fake.stop()
        compat.stop()
    logs = {path.stem: path.read_text(errors="replace") for path in config.log_dir.glob("*.log")}
    yield Run(logs, receiver.spans(), replies, verdicts)


def send_secrets(
    stack: LocalStack, fake: ChatCompletionsFake, replies: list[str], verdicts: list[str]
) -> None:
    endpoints = stack.endpoints
    client = openai.OpenAI(base_url=endpoints.base_url, api_key=TENANT_KEY, max_retries=0)
    ready_by = time.monotonic() + 30  # ready: the router may not have seen the worker yet
    while True:
        try:
            client.responses.create(model="turnpike-sim-4000", input="hi", max_output_tokens=16)
            break
        except openai.APIStatusError:
            if time.monotonic() > ready_by:
                raise
            time.sleep(0.2)

    # Credentials in a user message and in a tool's output: flagged, answered.
    flagged = client.responses.create(model="turnpike-sim-4000", input=LEAKY_PROMPT)
    assert flagged.metadata and "turnpike_safety_flags" in flagged.metadata
    verdicts.append(json.dumps(flagged.metadata))
    tool_output = client.responses.create(
        model="turnpike-sim-4000",
        input=[
            {"type": "message", "role": "user", "content": "Read my .env"},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": LEAKY_PROMPT},
        ],
        stream=True,
    )
    for event in tool_output:
        replies.append(event.model_dump_json())

    # A private key in a user message: blocked, and the verdict does not quote it.
    with pytest.raises(openai.BadRequestError) as blocked:
        client.responses.create(model="turnpike-sim-4000", input=f"Is this OK?\n{PRIVATE_KEY}")
    body = blocked.value.body
    assert isinstance(body, dict) and body["code"] == "content_policy_violation", body
    replies.append(json.dumps(body))
    verdicts.append(body["message"])

    # Wrong keys, over HTTP and at the WebSocket upgrade.
    wrong = openai.OpenAI(base_url=endpoints.base_url, api_key=WRONG_KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.responses.create(model="turnpike-sim-4000", input="hi")
    replies.append(json.dumps(refused.value.body))
    usage = httpx.get(
        f"{endpoints.base_url}/usage", headers={"Authorization": f"Bearer {WRONG_KEY}"}
    )
    assert usage.status_code == 401
    replies.append(usage.text)
    for header in (f"Basic {WRONG_KEY}", f"Bearer {WRONG_KEY} trailing", WRONG_KEY):
        malformed = httpx.post(
            f"{endpoints.base_url}/responses",
            headers={"Authorization": header},
            json={"model": "turnpike-sim-4000", "input": "hi"},
        )
        assert malformed.status_code == 401
        replies.append(malformed.text)
    with pytest.raises(InvalidStatus) as upgrade:
        ws_connect(
            endpoints.ws_url,
            additional_headers={"Authorization": f"Bearer {WRONG_WS_KEY}"},
            open_timeout=10,
        )
    assert upgrade.value.response.status_code == 401
    replies.append(upgrade.value.response.body.decode(errors="replace"))

    # Over WebSocket: a flagged turn and a blocked one on the same socket.
    with ws_connect(
        endpoints.ws_url,
        additional_headers={"Authorization": f"Bearer {TENANT_KEY}"},
        open_timeout=10,
    ) as sock:
        for text in (LEAKY_PROMPT, f"Keep this safe: {PRIVATE_KEY}"):
            sock.send(
                json.dumps({"type": "response.create", "model": "turnpike-sim-4000", "input": text})
            )
            while True:
                frame = sock.recv(timeout=30)
                assert isinstance(frame, str), frame  # events are text frames
                replies.append(frame)
                kind = json.loads(frame)["type"]
                if kind in ("response.completed", "response.failed", "error"):
                    break
        assert kind == "error"  # the private key was blocked

    # The Cerebras backend, with its key: answered; then refused with a 401 that quotes the
    # key the worker sent.
    answered = client.responses.create(model=CEREBRAS_MODEL, input="hello")
    assert answered.status == "completed"
    fake.api_key, fake.quote_wrong_key = "another-key", True
    failed = client.responses.create(model=CEREBRAS_MODEL, input="hello again")
    assert failed.status == "failed"
    replies.append(failed.model_dump_json())
    streamed = client.responses.create(model=CEREBRAS_MODEL, input="hello, streaming", stream=True)
    for event in streamed:
        replies.append(event.model_dump_json())
    assert any("backend_auth_failed" in r or "rejected the API key" in r for r in replies)


def send_to_self_hosted(stack: LocalStack, compat: ChatCompletionsFake, replies: list[str]):
    """The OpenAI-compatible backend with its key, then refused quoting the key it sent;
    and compaction, which seals with the server key."""
    client = openai.OpenAI(base_url=stack.endpoints.base_url, api_key=TENANT_KEY, max_retries=0)
    assert client.responses.create(model="self-hosted", input="hi").status == "completed"
    compat.api_key, compat.quote_wrong_key = "another-key", True
    failed = client.responses.create(model="self-hosted", input="hi again")
    assert failed.status == "failed"
    replies.append(failed.model_dump_json())
    turns: list[ResponseInputItemParam] = []
    for n in range(4):
        turns += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    compacted = client.responses.compact(model="turnpike-sim-4000", input=turns)
    assert compacted.output[0].type == "compaction"
    items = sent_back(compacted.output)
    again = client.responses.create(model="turnpike-sim-4000", input=as_input([*items, turns[0]]))
    assert again.status == "completed"


def found_in_span(span: Span, secret: str) -> bool:
    texts = [span.name, span.status_message, json.dumps(span.attributes, default=str)]
    texts += [json.dumps([name, attrs], default=str) for name, attrs in span.events]
    return any(secret in text for text in texts)


def test_the_run_was_verbose_and_traced(run):
    """The checks below mean something: every process logged, at DEBUG, and spans of
    every service arrived, the safety flags among their attributes."""
    assert {"gateway", "safety", "tokenizer", "router", "billing", "imageres"} <= set(run.logs)
    assert any(" DEBUG " in text for text in run.logs.values())
    services = {span.service for span in run.spans}
    assert {"gateway", "safety", "tokenizer", "router", "worker", "billing"} <= services
    assert any("turnpike.safety.flags" in span.attributes for span in run.spans)


@pytest.mark.parametrize("what", list(SECRETS))
def test_no_log_holds_the_secret(run, what):
    secret = SECRETS[what]
    leaks = [name for name, text in run.logs.items() if secret in text]
    assert not leaks, f"{what} is in the output of {leaks}"


@pytest.mark.parametrize("what", list(SECRETS))
def test_no_span_holds_the_secret(run, what):
    secret = SECRETS[what]
    leaks = sorted({f"{s.service}: {s.name}" for s in run.spans if found_in_span(s, secret)})
    assert not leaks, f"{what} is in the spans {leaks}"


DETECTED = ["an AWS access key id", "an AWS secret access key", "a GitHub token", "a private key"]


@pytest.mark.parametrize("what", DETECTED)
def test_no_safety_verdict_quotes_what_it_found(run, what):
    """The flags in a response's metadata and a block's message name the kind of
    credential found, never the credential."""
    assert len(run.verdicts) == 2
    assert not [verdict for verdict in run.verdicts if SECRETS[what] in verdict]


@pytest.mark.parametrize(
    "what",
    [
        "a private key",
        "the Cerebras API key",
        "the OpenAI-compatible server's API key",
        "a wrong API key",
    ],
)
def test_no_error_or_verdict_quotes_the_secret(run, what):
    """Verdicts, refusals and backend failures as the clients got them. (A flagged
    prompt's own text may come back in its own response: it is the tenant's.)"""
    secret = SECRETS[what]
    assert not [reply for reply in run.replies if secret in reply]
