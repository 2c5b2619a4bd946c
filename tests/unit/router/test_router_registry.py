from __future__ import annotations

import copy
import json

import pytest

from turnpike.backend_names import BACKEND_NAMES
from turnpike.router.registry import (
    DEFAULT_MODELS_FILE,
    ModelRegistry,
    RegistryError,
    UnknownModelError,
    load_models,
    parse_models,
)

SIM = {
    "id": "sim-a",
    "aliases": ["a"],
    "backend": "simulator",
    "owned_by": "turnpike",
    "created": 1700000000,
    "context_window": 1000,
    "max_output_tokens": 100,
    "tokens_per_second": 50,
    "ttft_ms": 10,
    "prefill_tokens_per_second": 5000,
}
HOSTED = {**SIM, "id": "hosted", "aliases": ["h"], "backend": "cerebras", "requires_env": "KEY_X"}


def doc(*entries: dict) -> dict:
    return {"models": [copy.deepcopy(e) for e in entries]}


def test_default_file_has_the_documented_models() -> None:
    env = {"CEREBRAS_API_KEY": "k", "TURNPIKE_OPENAI_COMPAT_BASE_URL": "http://vllm:8000/v1"}
    registry = ModelRegistry(load_models(), env=env)
    ids = [m.id for m in registry.models()]
    assert ids == [
        "turnpike-sim",
        "turnpike-sim-65",
        "turnpike-sim-4000",
        "gpt-oss-120b",
        "self-hosted",
    ]
    speeds = {m.id: m.tokens_per_second for m in registry.models()}
    assert speeds["turnpike-sim"] == 1000
    assert speeds["turnpike-sim-65"] == 65
    assert speeds["turnpike-sim-4000"] == 4000
    assert registry.resolve("turnpike-sim-1000").id == "turnpike-sim"
    assert registry.resolve("gpt-oss-120b").backend == "cerebras"
    assert registry.resolve("self-hosted").backend == "openai-compatible"
    for model in registry.models():
        assert model.context_window == 131072 and model.created > 0


def test_default_path_is_used_when_setting_is_empty() -> None:
    assert load_models("") == load_models(DEFAULT_MODELS_FILE)


def test_resolve_by_id_and_alias() -> None:
    registry = ModelRegistry(parse_models(doc(SIM)), env={})
    assert registry.resolve("sim-a") is registry.resolve("a")
    assert registry.resolve("a").aliases == ("a",)


def test_unknown_model_message() -> None:
    registry = ModelRegistry(parse_models(doc(SIM)), env={})
    with pytest.raises(UnknownModelError) as info:
        registry.resolve("x")
    assert str(info.value) == "The model 'x' does not exist or you do not have access to it."
    with pytest.raises(UnknownModelError):
        registry.resolve("SIM-A")  # names are exact


def test_env_gated_model_hidden_without_its_variable() -> None:
    entries = parse_models(doc(SIM, HOSTED))
    without = ModelRegistry(entries, env={"KEY_X": "  "})
    assert [m.id for m in without.models()] == ["sim-a"]
    with pytest.raises(UnknownModelError):
        without.resolve("hosted")
    with pytest.raises(UnknownModelError):
        without.resolve("h")
    with_key = ModelRegistry(entries, env={"KEY_X": "secret"})
    assert [m.id for m in with_key.models()] == ["sim-a", "hosted"]
    assert with_key.resolve("h").id == "hosted"


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("gpt-oss-120b", "CEREBRAS_API_KEY"),
        ("self-hosted", "TURNPIKE_OPENAI_COMPAT_BASE_URL"),
    ],
)
def test_hosted_models_gated_on_real_environment(
    monkeypatch: pytest.MonkeyPatch, model: str, variable: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    assert model not in [m.id for m in ModelRegistry(load_models()).models()]
    monkeypatch.setenv(variable, "x")
    assert model in [m.id for m in ModelRegistry(load_models()).models()]


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_every_shared_backend_name_is_accepted(backend: str) -> None:
    [entry] = parse_models(doc({**SIM, "backend": backend}))
    assert entry.backend == backend


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda e: e.pop("backend"), "missing field 'backend'"),
        (lambda e: e.update(backend="gpu"), "'backend' must be one of"),
        (lambda e: e.update(tokens_per_second=0), "'tokens_per_second' must be > 0"),
        (lambda e: e.update(tokens_per_second="fast"), "must be int or float"),
        (lambda e: e.update(context_window=True), "must be int"),
        (lambda e: e.update(max_output_tokens=5000), "exceeds 'context_window'"),
        (lambda e: e.update(speed=3), "unknown field(s) speed"),
        (lambda e: e.update(aliases=["", "b"]), "'aliases' must be a list"),
        (lambda e: e.update(id=""), "'id' must not be empty"),
        (lambda e: e.update(requires_env=""), "'requires_env' must not be empty"),
    ],
)
def test_invalid_entries_are_rejected(mutate, fragment: str) -> None:
    entry = copy.deepcopy(SIM)
    mutate(entry)
    with pytest.raises(RegistryError) as info:
        parse_models(doc(entry))
    assert fragment in str(info.value)
    assert "models[0]" in str(info.value)


def test_duplicate_names_are_rejected() -> None:
    clash = {**SIM, "id": "sim-b", "aliases": ["sim-a"]}
    with pytest.raises(RegistryError, match="'sim-a' is used by both 'sim-a' and 'sim-b'"):
        parse_models(doc(SIM, clash))


@pytest.mark.parametrize("data", [[], {"models": []}, {"models": {}}, {"models": [], "x": 1}])
def test_invalid_documents_are_rejected(data) -> None:
    with pytest.raises(RegistryError):
        parse_models(data)


def test_load_reports_bad_json_with_path(tmp_path) -> None:
    bad = tmp_path / "models.json"
    bad.write_text("{not json")
    with pytest.raises(RegistryError, match="not valid JSON") as info:
        load_models(bad)
    assert str(bad) in str(info.value)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc(SIM)))
    assert [m.id for m in load_models(good)] == ["sim-a"]
    with pytest.raises(RegistryError, match="cannot read"):
        load_models(tmp_path / "missing.json")
