"""Bad configuration fails the same way everywhere: the settings readers raise a
ConfigError naming the variable and its value, and every service's entry point turns it
into one line on stderr, "<service>: configuration error: <message>", and exit code 2,
before it serves anything and without a traceback."""

from __future__ import annotations

import logging

import pytest
from support.config_errors import assert_configuration_error, run_with

from turnpike.catalogue import SERVICES
from turnpike.config import (
    ConfigError,
    Endpoints,
    GatewaySettings,
    GrpcServerSettings,
    log_level,
)
from turnpike.config_model import EnvSettings, Flag, Integer, Number, setting

# -- the readers -------------------------------------------------------------------------


class Sample(EnvSettings):
    """One variable of each kind, as services declare them."""

    count: Integer = setting("TURNPIKE_SAMPLE_COUNT", 3)
    rate: Number = setting("TURNPIKE_SAMPLE_RATE", 0.5)
    flag: Flag = setting("TURNPIKE_SAMPLE_FLAG", True)


@pytest.mark.parametrize(
    "variable, raw, problem",
    [
        ("TURNPIKE_SAMPLE_COUNT", "12k", "not an integer"),
        ("TURNPIKE_SAMPLE_RATE", "fast", "not a number"),
        ("TURNPIKE_SAMPLE_FLAG", "maybe", "not a boolean"),
    ],
)
def test_a_malformed_value_is_named_with_its_variable(monkeypatch, variable, raw, problem):
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ConfigError) as caught:
        Sample()
    assert str(caught.value).startswith(f"{variable}={raw!r}: {problem}")


def test_readers_keep_their_defaults_and_read_good_values(monkeypatch):
    monkeypatch.setenv("TURNPIKE_SAMPLE_COUNT", "")
    monkeypatch.setenv("TURNPIKE_SAMPLE_FLAG", " ")
    assert (Sample().count, Sample().flag) == (3, True)
    monkeypatch.setenv("TURNPIKE_SAMPLE_COUNT", " 42 ")
    monkeypatch.setenv("TURNPIKE_SAMPLE_RATE", " 42 ")
    assert (Sample().count, Sample().rate) == (42, 42.0)
    for raw, value in (("Yes", True), ("on", True), ("0", False), ("FALSE", False)):
        monkeypatch.setenv("TURNPIKE_SAMPLE_FLAG", raw)
        assert Sample().flag is value


@pytest.mark.parametrize("raw", ["0", "65536", "-1", "http"])
def test_a_port_outside_the_valid_range_is_refused(monkeypatch, raw):
    monkeypatch.setenv("TURNPIKE_ROUTER_PORT", raw)
    with pytest.raises(ConfigError, match=rf"^TURNPIKE_ROUTER_PORT='{raw}': "):
        GrpcServerSettings.for_service("router")


@pytest.mark.parametrize("raw", ["safety", "safety:", ":50051", "safety:port"])
def test_a_backend_address_must_be_host_and_port(monkeypatch, raw):
    monkeypatch.setenv("TURNPIKE_SAFETY_ADDR", raw)
    with pytest.raises(ConfigError, match=r"^TURNPIKE_SAFETY_ADDR=.*host:port"):
        Endpoints()
    monkeypatch.setenv("TURNPIKE_SAFETY_ADDR", "safety:50051")
    assert Endpoints().safety == "safety:50051"


def test_settings_are_checked_when_read(monkeypatch):
    monkeypatch.setenv("TURNPIKE_WS_MAX_LANES", "many")
    with pytest.raises(ConfigError, match="TURNPIKE_WS_MAX_LANES='many'"):
        GatewaySettings()


@pytest.mark.parametrize(
    "name", ["TURNPIKE_WRITE_STALL_TIMEOUT_S", "TURNPIKE_WORKER_SILENCE_TIMEOUT_S"]
)
def test_a_timeout_must_be_above_zero(monkeypatch, name):
    monkeypatch.setenv(name, "0")
    with pytest.raises(ConfigError, match=f"^{name}='0.0': must be above 0"):
        GatewaySettings()


# -- every service, as a process ------------------------------------------------------------


@pytest.mark.parametrize("service", [s.name for s in SERVICES])
def test_every_service_exits_2_naming_a_bad_port(service):
    variable = next(s.port_variable for s in SERVICES if s.name == service)
    code, err = run_with(service, {variable: "eighty"})
    assert_configuration_error(service, code, err, variable, "'eighty'")


@pytest.mark.parametrize(
    "service, variable, value",
    [
        # Read with the gateway's settings, before uvicorn starts the app: its image
        # limits, its keys, and more processes than one without a shared store.
        ("gateway", "TURNPIKE_IMAGERES_MAX_IMAGE_BYTES", "20MB"),
        ("gateway", "TURNPIKE_GATEWAY_PROCESSES", "2"),
        ("gateway", "TURNPIKE_GATEWAY_PROCESSES", "0"),
        ("gateway", "TURNPIKE_API_KEYS", "sk-without-tenant"),
        ("gateway", "TURNPIKE_ROUTER_ADDR", "router"),
        ("router", "TURNPIKE_WORKERS", "worker-1"),
        ("worker", "TURNPIKE_WORKER_DELTA_INTERVAL_MS", "-5"),
        ("worker", "TURNPIKE_WORKER_DELTA_MAX_TOKENS", "0"),
        ("router", "TURNPIKE_MODELS_FILE", "/nonexistent/models.json"),
        ("safety", "TURNPIKE_SAFETY_FLAG_THRESHOLD", "high"),
        ("billing", "TURNPIKE_SHUTDOWN_GRACE_S", "soon"),
    ],
)
def test_service_specific_settings_fail_the_same_way(service, variable, value):
    code, err = run_with(service, {variable: value})
    assert_configuration_error(service, code, err, variable)


def test_the_log_level_is_one_of_four_names(monkeypatch):
    monkeypatch.setenv("TURNPIKE_LOG_LEVEL", "debug")
    assert log_level() == logging.DEBUG
    monkeypatch.delenv("TURNPIKE_LOG_LEVEL")
    assert log_level() == logging.INFO
    monkeypatch.setenv("TURNPIKE_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="TURNPIKE_LOG_LEVEL='LOUD'"):
        log_level()
