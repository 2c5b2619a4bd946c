"""Tenants and their keys (turnpike.gateway.tenancy.tenants): the tenants file and its errors, each naming
its line; key lookups; model allow-lists; budget periods; reload; the mint and check
commands; and real gateway processes started with a bad file and with a good one."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import httpx
import jsonschema
import pytest
from support.config_errors import assert_configuration_error, run_with
from support.gateway_process import start_gateway, stop
from support.procs import REPO_ROOT

from turnpike.config import ConfigError, GatewaySettings
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.tenancy.tenant_limits import NO_ACCESS, UNLIMITED, TenantLimits, TokenBudget
from turnpike.gateway.tenancy.tenants import TenantDirectory, main, reload_on_sighup
from turnpike.gateway.tenancy.tenants_file import SCHEMA_PATH, hash_key, load_file

ACME_KEY = "sk-turnpike-acme-test-key"
BETA_KEY = "sk-turnpike-beta-test-key"
ACME = hash_key(ACME_KEY)
BETA = hash_key(BETA_KEY)
OTHER = "sha256:" + "ab" * 32

GOOD = f"""\
tenants:
  acme:
    keys: ["{ACME}"]
    requests_per_minute: 600
    tokens_per_minute: 200000
    max_concurrent_responses: 32
    max_websocket_connections: 8
    token_budget: {{tokens: 10000000, period: day}}
    models: [turnpike-sim, turnpike-sim-4000]
  beta:
    keys:
      - "{BETA}"
    requests_per_minute: 60
"""


def write(tmp_path: Path, text: str, name: str = "tenants.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


# -- the file: what it holds ---------------------------------------------------------------


def test_a_good_file_gives_each_tenant_its_limits(tmp_path):
    directory = TenantDirectory.from_file(write(tmp_path, GOOD))
    assert directory.tenants() == ["acme", "beta"]
    assert directory.limits("acme") == TenantLimits(
        requests_per_minute=600,
        tokens_per_minute=200_000,
        max_concurrent_responses=32,
        max_websocket_connections=8,
        token_budget=TokenBudget(10_000_000, "day"),
        models=frozenset({"turnpike-sim", "turnpike-sim-4000"}),
    )
    # Left out is unlimited.
    assert directory.limits("beta") == TenantLimits(requests_per_minute=60)


def test_the_shipped_schema_is_valid_and_the_example_file_loads():
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))
    table = load_file(str(REPO_ROOT / "deploy" / "tenants" / "example.yaml"))
    assert list(table.limits) == ["acme", "beta", "retired"]
    assert table.limits["acme"].token_budget == TokenBudget(10_000_000, "day")
    assert table.hashes_by_tenant()["retired"] == set()


# -- the file: each error names its line ---------------------------------------------------


HEAD = f'tenants:\n  acme:\n    keys: ["{ACME}"]\n'  # lines 1 to 3
UNCLOSED_HEAD = HEAD[:-2] + "\n"  # keys: ["... without its "]"

# Each bad file: (its text, the line the error names, what it says there).
BAD_FILES = {
    "unknown field": (
        HEAD + "    requests_per_minite: 600\n",
        4,
        "tenants.acme: unknown field 'requests_per_minite' (allowed: keys, requests_per_minute",
    ),
    "unknown top-level field": (HEAD + "version: 2\n", 4, "the file: unknown field 'version'"),
    "duplicate mapping key": (
        HEAD + "    requests_per_minute: 600\n    requests_per_minute: 60\n",
        5,
        "tenants.acme: duplicate key 'requests_per_minute' (first on line 4)",
    ),
    "duplicate tenant": (HEAD + "  acme: {keys: []}\n", 4, "tenants: duplicate key 'acme' (first"),
    "duplicate hash across tenants": (
        HEAD + f'  beta:\n    keys:\n      - "{BETA}"\n      - "{ACME}"\n',
        7,
        "tenants.beta.keys[1]: the same key hash as tenants.acme.keys[0] (line 3)",
    ),
    "duplicate hash in one tenant": (
        f'tenants:\n  acme:\n    keys:\n      - "{ACME}"\n      - "{ACME}"\n',
        5,
        "tenants.acme.keys[1]: the same key hash as tenants.acme.keys[0] (line 4)",
    ),
    "negative limit": (
        HEAD + f'\n  beta:\n    keys: ["{BETA}"]\n    requests_per_minute: -5\n',
        7,
        "tenants.beta.requests_per_minute: -5 is less than the minimum of 0",
    ),
    "wrong type": (HEAD + '    tokens_per_minute: "200k"\n', 4, "must be an integer, not a string"),
    "a float is no limit": (HEAD + "    max_concurrent_responses: 1.0\n", 4, "not 1.0"),
    "a boolean is no limit": (HEAD + "    max_websocket_connections: yes\n", 4, "not True"),
    "models not a list": (HEAD + "    models: turnpike-sim\n", 4, "must be a list, not a string"),
    "bad hash": (
        HEAD + '    models: []\n  beta:\n    keys: ["sha256:abc"]\n',
        6,
        "tenants.beta.keys[0]: not a key hash: expected 'sha256:' and 64 lowercase hex",
    ),
    "keys not a list": (
        'tenants:\n  acme:\n    keys: "sha256:abc"\n',
        3,
        "tenants.acme.keys: must be a list of key hashes",
    ),
    "no keys": ("tenants:\n  acme: {requests_per_minute: 5}\n", 2, "'keys' is a required property"),
    "bad period": (
        HEAD + "    token_budget:\n      tokens: 1000\n      period: fortnight\n",
        6,
        "tenants.acme.token_budget.period: 'fortnight' is not one of ['hour', 'day', 'week'",
    ),
    "budget without a period": (
        HEAD + "    token_budget: {tokens: 1000}\n",
        4,
        "tenants.acme.token_budget: 'period' is a required property",
    ),
    "bad YAML": (UNCLOSED_HEAD + "    requests_per_minute: 600\n", 4, "not valid YAML: "),
    "bad indentation": (HEAD + "   requests_per_minute: 600\n", 4, "not valid YAML: "),
    "tenant name not a string": (HEAD.replace("acme", "yes"), 2, "tenant name True must be a"),
    "no tenant": ("tenants: {}\n", 1, "tenants: no tenant; name at least one"),
    "empty file": ("# nothing yet\n", 1, "the file is empty"),
    "a list": ("- acme\n", 1, "the file: must be a mapping, not a list"),
}


@pytest.mark.parametrize("text, line, problem", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_file_is_refused_naming_its_line(tmp_path, text, line, problem):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    message = str(caught.value)
    assert message.startswith(f"TURNPIKE_TENANTS_FILE={path} line {line}: ") and problem in message


def test_the_message_reads_as_the_issue_shows_it(tmp_path):
    path = write(tmp_path, GOOD.replace("requests_per_minute: 60\n", "requests_per_minute: -5\n"))
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert str(caught.value) == (
        f"TURNPIKE_TENANTS_FILE={path} line 13: "
        "tenants.beta.requests_per_minute: -5 is less than the minimum of 0"
    )


def test_a_plain_key_in_place_of_a_hash_is_never_echoed(tmp_path):
    path = write(tmp_path, f'tenants:\n  acme:\n    keys: ["{ACME_KEY}"]\n')
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert "line 3: tenants.acme.keys[0]: not a key hash" in str(caught.value)
    assert ACME_KEY not in str(caught.value)
    # Nor in a YAML error, whose own text quotes the line.
    path = write(tmp_path, f'tenants:\n  acme:\n    keys: ["{ACME_KEY}"\n  beta: 1\n')
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert "not valid YAML" in str(caught.value) and ACME_KEY not in str(caught.value)


def test_of_several_problems_the_first_in_the_file_is_named(tmp_path):
    path = write(
        tmp_path,
        f"""\
        tenants:
          acme:
            keys: ["{ACME}"]
            requests_per_minute: -1
            tokens_per_minute: -2
        """,
    )
    with pytest.raises(ConfigError, match=r"line 4: tenants\.acme\.requests_per_minute"):
        load_file(path)


def test_an_unreadable_file_is_named(tmp_path):
    missing = str(tmp_path / "absent.yaml")
    with pytest.raises(
        ConfigError, match=f"^TURNPIKE_TENANTS_FILE={re.escape(missing)}: cannot read it"
    ):
        load_file(missing)
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes(b"tenants:\n  caf\xe9:\n")
    with pytest.raises(ConfigError, match="line 2: not UTF-8 text"):
        load_file(str(binary))


# -- settings: the file or TURNPIKE_API_KEYS ----------------------------------------------


def test_the_file_replaces_api_keys_and_both_at_once_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD)
    monkeypatch.delenv("TURNPIKE_API_KEYS", raising=False)
    monkeypatch.setenv("TURNPIKE_TENANTS_FILE", path)
    directory = TenantDirectory.from_settings(GatewaySettings())
    assert directory.tenants() == ["acme", "beta"]
    with pytest.raises(ApiError):  # the development key is not a tenant's any more
        directory.tenant_for(bearer("sk-turnpike-dev"))
    monkeypatch.setenv("TURNPIKE_API_KEYS", "")  # empty is unset
    assert GatewaySettings().tenants_file == path
    monkeypatch.setenv("TURNPIKE_API_KEYS", "sk-a:acme")
    with pytest.raises(ConfigError, match=r"^TURNPIKE_TENANTS_FILE=.*set only one of them"):
        GatewaySettings()


def test_api_keys_still_work_and_every_tenant_is_unlimited(monkeypatch):
    monkeypatch.delenv("TURNPIKE_TENANTS_FILE", raising=False)
    monkeypatch.setenv("TURNPIKE_API_KEYS", "k1:acme,k2:acme,k3:bob")
    directory = TenantDirectory.from_settings(GatewaySettings())
    assert directory.tenants() == ["acme", "bob"]
    assert [directory.tenant_for(bearer(k)) for k in ("k1", "k2", "k3")] == ["acme", "acme", "bob"]
    assert directory.limits("acme") is UNLIMITED and directory.limits("bob") is UNLIMITED
    monkeypatch.delenv("TURNPIKE_API_KEYS")
    assert TenantDirectory.from_settings(GatewaySettings()).tenants() == ["dev"]


# -- lookups -------------------------------------------------------------------------------


def test_keys_map_to_their_tenants_and_anything_else_is_a_401(tmp_path):
    directory = TenantDirectory.from_file(write(tmp_path, GOOD))
    assert directory.tenant_for(bearer(ACME_KEY)) == "acme"
    assert directory.tenant_for({"authorization": f"bearer  {BETA_KEY} "}) == "beta"
    with pytest.raises(ApiError) as wrong:
        directory.tenant_for(bearer("sk-turnpike-someone-else"))
    assert wrong.value.status == 401
    assert wrong.value.body()["error"]["message"] == (
        "Incorrect API key provided: sk-t********else."
    )
    with pytest.raises(ApiError) as hashed:  # the hash itself is not a key
        directory.tenant_for(bearer(ACME))
    assert hashed.value.status == 401
    for headers in ({}, {"authorization": f"Basic {ACME_KEY}"}, {"authorization": "Bearer "}):
        with pytest.raises(ApiError) as missing:
            directory.tenant_for(headers)
        assert missing.value.status == 401 and missing.value.body()["error"]["code"] == (
            "invalid_api_key"
        )


def test_a_name_that_is_no_tenant_gets_no_access(tmp_path):
    directory = TenantDirectory.from_file(write(tmp_path, GOOD))
    assert directory.limits("gone") is NO_ACCESS
    assert not NO_ACCESS.allows_model("turnpike-sim")


def test_the_model_allow_list():
    limits = TenantLimits(models=frozenset({"turnpike-sim"}))
    assert limits.allows_model("turnpike-sim")
    assert not limits.allows_model("turnpike-sim-4000")
    assert UNLIMITED.allows_model("anything")
    assert not TenantLimits(models=frozenset()).allows_model("turnpike-sim")


# -- budget periods ------------------------------------------------------------------------


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "period, now, start, end",
    [
        ("hour", at(2025, 3, 5, 14, 59, 59), at(2025, 3, 5, 14), at(2025, 3, 5, 15)),
        ("hour", at(2025, 12, 31, 23, 30), at(2025, 12, 31, 23), at(2026, 1, 1)),
        ("day", at(2025, 3, 5, 0, 0, 0), at(2025, 3, 5), at(2025, 3, 6)),
        ("day", at(2024, 2, 28, 23, 0), at(2024, 2, 28), at(2024, 2, 29)),
        # 2025-03-05 is a Wednesday; weeks start on Monday.
        ("week", at(2025, 3, 5, 12), at(2025, 3, 3), at(2025, 3, 10)),
        ("week", at(2025, 3, 3), at(2025, 3, 3), at(2025, 3, 10)),
        ("week", at(2025, 3, 9, 23, 59), at(2025, 3, 3), at(2025, 3, 10)),
        ("week", at(2025, 12, 31), at(2025, 12, 29), at(2026, 1, 5)),
        ("month", at(2025, 3, 31, 23, 59), at(2025, 3, 1), at(2025, 4, 1)),
        ("month", at(2025, 12, 15), at(2025, 12, 1), at(2026, 1, 1)),
        ("month", at(2024, 2, 29, 12), at(2024, 2, 1), at(2024, 3, 1)),
    ],
)
def test_budget_periods_are_calendar_periods_in_utc(period, now, start, end):
    budget = TokenBudget(1000, period)
    assert budget.period_start(now) == start
    assert budget.period_end(now) == end
    assert budget.period_start(now + 0.5) == start  # fractions of a second too


def test_a_budget_period_must_be_known():
    with pytest.raises(ValueError):
        TokenBudget(1000, "fortnight")


# -- reload --------------------------------------------------------------------------------


def test_reload_serves_the_new_file_and_logs_names_never_keys(tmp_path, caplog):
    path = write(tmp_path, GOOD)
    directory = TenantDirectory.from_file(path)
    # acme gets another key, beta goes, gamma comes with its key.
    write(tmp_path, GOOD.replace(ACME, OTHER).replace("beta", "gamma"))
    with caplog.at_level(logging.INFO, logger="turnpike.gateway.tenancy.tenants"):
        directory.reload()
    assert directory.tenants() == ["acme", "gamma"]
    assert directory.tenant_for(bearer(BETA_KEY)) == "gamma"
    with pytest.raises(ApiError):
        directory.tenant_for(bearer(ACME_KEY))
    assert directory.limits("beta") is NO_ACCESS
    [record] = caplog.records
    assert record.getMessage() == (
        f"tenants file {path} reloaded: 2 tenants; added: gamma; removed: beta; new keys: acme"
    )
    for secret in (ACME_KEY, BETA_KEY, ACME, BETA, OTHER):
        assert secret not in caplog.text


def test_a_bad_file_on_reload_keeps_the_tenants_in_force(tmp_path, caplog):
    path = write(tmp_path, GOOD)
    directory = TenantDirectory.from_file(path)
    write(tmp_path, GOOD + "    requests_per_hour: 5\n")
    with caplog.at_level(logging.INFO, logger="turnpike.gateway.tenancy.tenants"):
        directory.reload()  # raises nothing
    assert directory.tenant_for(bearer(ACME_KEY)) == "acme"
    assert directory.limits("beta").requests_per_minute == 60
    [record] = caplog.records
    assert record.levelname == "ERROR"
    assert f"TURNPIKE_TENANTS_FILE={path} line 14: tenants.beta: unknown field" in (
        record.getMessage()
    )
    Path(path).unlink()
    directory.reload()
    assert directory.tenants() == ["acme", "beta"]


def test_reload_without_a_file_changes_nothing(caplog):
    directory = TenantDirectory.from_api_keys("k1:acme")
    with caplog.at_level(logging.INFO, logger="turnpike.gateway.tenancy.tenants"):
        directory.reload()
    assert directory.tenant_for(bearer("k1")) == "acme"
    assert "TURNPIKE_API_KEYS" in caplog.text


async def test_sighup_reloads_while_the_app_runs(tmp_path):
    path = write(tmp_path, GOOD)
    directory = TenantDirectory.from_file(path)
    write(tmp_path, GOOD.replace("beta", "delta"))
    with reload_on_sighup(directory):
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if "delta" in directory.tenants():
                break
    assert directory.tenants() == ["acme", "delta"]
    # Gone with the lifespan: the default action is back.
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


# -- the commands --------------------------------------------------------------------------


def test_a_minted_key_round_trips_through_the_file(tmp_path, capsys):
    main(["mint", "acme"])
    out, err = capsys.readouterr()
    key, line = out.splitlines()
    assert key.startswith("sk-turnpike-") and len(key) >= 12 + 43
    assert line == f'- "{hash_key(key)}"'
    assert "tenants.acme.keys" in err and key not in err
    path = write(tmp_path, f"tenants:\n  acme:\n    keys:\n      {line}\n")
    assert TenantDirectory.from_file(path).tenant_for(bearer(key)) == "acme"
    main(["mint", "acme"])
    assert capsys.readouterr().out.splitlines()[0] != key  # never the same key twice


def test_mint_refuses_a_tenant_name_the_file_would_refuse():
    with pytest.raises(ConfigError, match="tenant name 'a b'"):
        main(["mint", "a b"])


def test_check_says_what_the_gateway_would_say(tmp_path):
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, GOOD + "  beta:\n    keys: []\n", "bad.yaml")
    command = [sys.executable, "-m", "turnpike.gateway.tenancy.tenants", "check"]
    ok = subprocess.run([*command, good], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "valid: 2 tenants, 2 keys" in ok.stdout
    refused = subprocess.run([*command, bad], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"gateway: configuration error: TURNPIKE_TENANTS_FILE={bad} line 14: "
        "tenants: duplicate key 'beta' (first on line 10)"
    )


# -- a real gateway process ----------------------------------------------------------------


def test_a_gateway_with_a_bad_file_exits_2_naming_the_line(tmp_path):
    path = write(tmp_path, GOOD.replace("requests_per_minute: 60\n", "requests_per_minute: -5\n"))
    code, err = run_with("gateway", {"TURNPIKE_TENANTS_FILE": path})
    assert_configuration_error(
        "gateway", code, err, f"TURNPIKE_TENANTS_FILE={path} line 13:", "minimum of 0"
    )


# Backends nobody listens on: the keys are checked before any of them is called.
NO_BACKENDS = SimpleNamespace(
    **dict.fromkeys(("safety", "tokenizer", "router", "billing", "imageres"), "127.0.0.1:9")
)


def test_a_gateway_with_a_good_file_takes_its_keys_and_reloads_on_sighup(tmp_path, capsys):
    main(["mint", "acme"])
    key, line = capsys.readouterr().out.splitlines()
    path = write(tmp_path, f"tenants:\n  acme:\n    keys:\n      {line}\n")
    proc, base = start_gateway(
        NO_BACKENDS, ready_path="/healthz", TURNPIKE_API_KEYS="", TURNPIKE_TENANTS_FILE=path
    )

    def status(api_key: str) -> int:
        url = f"{base}/v1/responses/resp_none"
        return httpx.get(url, headers={"Authorization": f"Bearer {api_key}"}, timeout=5).status_code

    try:
        assert status(key) == 404  # past the key check: no such response
        assert status("sk-turnpike-dev") == 401
        assert status(BETA_KEY) == 401
        # A new tenant, and a reload.
        write(
            tmp_path, f"tenants:\n  acme:\n    keys:\n      {line}\n  beta:\n    keys: [{BETA}]\n"
        )
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while status(BETA_KEY) != 404:
            assert time.monotonic() < deadline, "SIGHUP did not reload the tenants file"
            time.sleep(0.1)
        # A bad file on reload: the gateway keeps serving with what it had.
        write(tmp_path, "tenants:\n  acme: [\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None
        assert status(key) == 404 and status(BETA_KEY) == 404
    finally:
        stop(proc)
    assert proc.returncode in (0, -signal.SIGTERM)
