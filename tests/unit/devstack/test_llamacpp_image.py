"""`make run LLAMACPP=1` starts the image `make image-llamacpp` builds: the name the devstack
uses by default is the one .env declares (the build's configuration surface)."""

from __future__ import annotations

from support.paths import REPO_ROOT

from turnpike.devstack.__main__ import parse_args
from turnpike.devstack.llamacpp import DEFAULT_IMAGE, LlamaServer


def test_the_default_image_is_the_one_env_declares() -> None:
    lines = (REPO_ROOT / ".env").read_text().splitlines()
    [declared] = [
        line.partition("=")[2] for line in lines if line.startswith("LLAMACPP_MODEL_IMAGE=")
    ]
    assert DEFAULT_IMAGE == declared


def test_the_workers_are_pointed_at_the_server_and_ask_calls_as_json() -> None:
    env = LlamaServer(port=18089, image="x").worker_env()
    assert env["TURNPIKE_OPENAI_COMPAT_BASE_URL"] == "http://127.0.0.1:18089/v1"
    assert env["TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON"] == "true"
    assert parse_args(["--llamacpp"]).llamacpp and not parse_args([]).llamacpp
