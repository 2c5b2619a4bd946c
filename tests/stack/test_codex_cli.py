"""The real Codex CLI (``codex exec``, from the pinned openai-codex-cli-bin wheel) against
the stack, over HTTP and SSE and over WebSocket mode; and the 426 that moves it from a
WebSocket the gateway will not take to HTTP."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from support.access_log import access_lines
from support.codex import codex_binary, codex_home, run_codex
from support.gateway_process import start_gateway, stop
from support.openresponses import validate_error_body
from support.paths import REPO_ROOT
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(codex_binary() is None, reason="openai-codex-cli-bin is not installed"),
]

PROMPT = "Say hello."
ROUTER_MODELS = REPO_ROOT / "src" / "turnpike" / "router" / "models.json"


def assert_answered(result) -> None:
    assert result.exit_code == 0, result.stderr
    # `codex exec` prints the final assistant message, and only it, on stdout.
    assert result.stdout.strip(), result.stderr


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_completes_a_task(stack, tmp_path: Path, websockets: bool) -> None:
    home = codex_home(tmp_path / "codex", stack.base_url, websockets=websockets)
    result = run_codex(home, tmp_path / "work", PROMPT, api_key=stack.api_key)
    assert_answered(result)
    session = result.stderr.split("session id: ", 1)[1].split()[0]
    assert session
    lines = access_lines(stack.log_dir / "gateway.log")
    transports = {line["transport"] for line in lines if line["tenant"] == "dev"}
    assert ("websocket" if websockets else "sse") in transports


def test_with_a_model_catalog_codex_finds_the_models_metadata(stack, tmp_path: Path) -> None:
    """Codex never asks an env_key provider's /models (support.codex.model_catalog says
    why); the catalog file its config names is what silences "Model metadata for
    `turnpike-sim` not found. Defaulting to fallback metadata"."""
    registry = json.loads(ROUTER_MODELS.read_text())["models"]
    window = next(m["context_window"] for m in registry if m["id"] == "turnpike-sim")
    home = codex_home(tmp_path / "codex", stack.base_url, websockets=True, context_window=window)
    result = run_codex(home, tmp_path / "work", PROMPT, api_key=stack.api_key)
    assert_answered(result)
    assert "Model metadata for" not in result.stderr, result.stderr
    assert "Unknown model turnpike-sim" not in result.stderr, result.stderr


def test_with_websocket_mode_off_the_upgrade_is_426_and_codex_uses_http(
    stack, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    proc, base = start_gateway(stack, log=log, TURNPIKE_WEBSOCKET_MODE="false")
    try:
        url = base.replace("http://", "ws://") + "/v1/responses"
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(url, additional_headers={"Authorization": "Bearer sk-turnpike-dev"})
        assert refused.value.response.status_code == 426
        body = json.loads(refused.value.response.body)
        validate_error_body(body)
        assert body["error"]["code"] == "websocket_unavailable"

        home = codex_home(tmp_path / "codex", f"{base}/v1", websockets=True)
        result = run_codex(home, tmp_path / "work", PROMPT, api_key="sk-turnpike-dev")
    finally:
        stop(proc)
    assert_answered(result)
    codex_lines = [line for line in access_lines(log) if line["tenant"] == "dev"][1:]
    upgrades = [line for line in codex_lines if line["transport"] == "websocket"]
    creates = [line for line in codex_lines if line["transport"] == "sse"]
    # Codex tried the socket once, took the 426, and went on over HTTP: no retries.
    assert [line["status"] for line in upgrades] == [426], upgrades
    assert creates and all(line["status"] == 200 for line in creates), creates


def test_a_shedding_gateway_answers_a_new_upgrade_426(stack) -> None:
    """At its in-flight bound the gateway takes no new socket (426, so Codex goes on over
    HTTP, where requests are admitted or shed one by one); once it has room it does."""
    proc, base = start_gateway(stack, TURNPIKE_MAX_IN_FLIGHT="1")
    url = base.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": "Bearer sk-turnpike-dev"}
    try:
        with ws_connect(url, additional_headers=headers) as busy:
            busy.send(
                json.dumps(
                    {
                        "type": "response.create",
                        "input": "Tell me a very long story.",
                        "max_output_tokens": 4000,
                    }
                )
            )
            while json.loads(busy.recv(timeout=30))["type"] != "response.created":
                pass
            with pytest.raises(InvalidStatus) as refused:
                ws_connect(url, additional_headers=headers, open_timeout=10)
            assert refused.value.response.status_code == 426
            body = json.loads(refused.value.response.body)
            validate_error_body(body)
            assert body["error"]["code"] == "websocket_unavailable"
        # The busy socket closed, its response was stopped: the bound has room again.
        for _ in range(50):
            try:
                with ws_connect(url, additional_headers=headers, open_timeout=10):
                    break
            except InvalidStatus as exc:
                assert exc.response.status_code == 426
                time.sleep(0.1)  # the stopped response releases its slot
        else:
            pytest.fail("the gateway never took a socket again")
    finally:
        stop(proc)


# A multi-step task as the simulator follows one (turnpike.worker.answers: one call per step).
TASK = (
    "Do this:\n1. Run `git log --oneline`.\n2. Apply a patch that adds notes.md with a greeting.\n"
)


def git_repo(path: Path) -> Path:
    """A fresh repository with one commit, as a project Codex works in."""
    path.mkdir(parents=True)
    (path / "README.md").write_text("# A project\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for argv in (["init", "-q"], ["add", "README.md"], ["commit", "-qm", "First commit"]):
        subprocess.run([*git, *argv], cwd=path, check=True, capture_output=True)
    return path


def codex_events(stdout: str) -> list[dict]:
    """``codex exec --json``'s events (JSON lines)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_runs_a_command_and_applies_a_patch(stack, tmp_path: Path, websockets: bool) -> None:
    """Codex with its default tools and its freeform apply_patch (the model's catalog
    entry declares it): the command runs and its output goes back, then the patch the
    simulator writes under the Lark grammar changes the repository."""
    registry = json.loads(ROUTER_MODELS.read_text())["models"]
    window = next(m["context_window"] for m in registry if m["id"] == "turnpike-sim")
    home = codex_home(
        tmp_path / "codex",
        stack.base_url,
        websockets=websockets,
        context_window=window,
        refused_tools_off=False,
    )
    work = git_repo(tmp_path / "work")
    result = run_codex(
        home,
        work,
        TASK,
        api_key=stack.api_key,
        extra_args=("--json", "--sandbox", "workspace-write"),
    )
    assert result.exit_code == 0, result.stderr
    items = [e["item"] for e in codex_events(result.stdout) if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    assert commands and "git log --oneline" in commands[0]["command"], items
    assert commands[0]["exit_code"] == 0 and "First commit" in commands[0]["aggregated_output"]
    changes = [i for i in items if i.get("type") == "file_change"]
    assert changes and changes[0]["status"] == "completed", items
    notes = work / "notes.md"
    assert notes.is_file() and notes.read_text().strip(), result.stdout
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=work, capture_output=True, text=True, check=True
    )
    assert "?? notes.md" in status.stdout
