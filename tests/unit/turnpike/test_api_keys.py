"""TURNPIKE_API_KEYS ("key:tenant,..."): one strict parser (turnpike.config), from which
the gateway derives key -> tenant and devstack tenant -> key, so both accept and refuse
the same settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnpike.config import ConfigError, GatewaySettings, parse_api_keys
from turnpike.devstack.environment import stack_endpoints
from turnpike.devstack.layout import StackConfig
from turnpike.gateway.tenancy.tenants import TenantDirectory


def test_pairs_come_in_order_with_spaces_and_empty_entries_ignored():
    assert parse_api_keys(" k1:t1 , k2:t2,") == [("k1", "t1"), ("k2", "t2")]
    # A key may hold a colon: the tenant is what follows the last one.
    assert parse_api_keys("sk:abc:team") == [("sk:abc", "team")]


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("sk-secret-one", "entry 1 is not key:tenant"),
        ("k1:t1,:tenant", "entry 2 is not key:tenant"),
        ("sk-secret-one:", "entry 1 is not key:tenant"),
        ("sk-secret-one:a,sk-secret-one:b", "entry 2 repeats the key of entry 1"),
        ("", "no key:tenant pair"),
        (" , ", "no key:tenant pair"),
    ],
)
def test_a_malformed_setting_is_refused_naming_the_variable_not_the_key(spec, problem):
    with pytest.raises(ConfigError) as caught:
        parse_api_keys(spec)
    message = str(caught.value)
    assert message.startswith("TURNPIKE_API_KEYS") and problem in message
    assert "secret" not in message  # keys are secrets: never echoed


def test_the_gateway_maps_keys_to_tenants():
    keys = TenantDirectory.from_api_keys("k1:acme,k2:acme,k3:bob")
    tenants = [keys.tenant_for({"authorization": f"Bearer {k}"}) for k in ("k1", "k2", "k3")]
    assert tenants == ["acme", "acme", "bob"]


def stack_keys(tmp_path: Path, spec: str) -> dict[str, str]:
    config = StackConfig(
        state_dir=tmp_path, extra_env={"TURNPIKE_API_KEYS": spec}, inherit_turnpike_env=False
    )
    return stack_endpoints(config).api_keys


def test_devstack_tells_clients_the_first_key_of_each_tenant(tmp_path):
    assert stack_keys(tmp_path, "k1:acme,k2:acme,k3:bob") == {"acme": "k1", "bob": "k3"}


@pytest.mark.parametrize("spec", ["k1", "k1:", ""])
def test_devstack_and_the_gateway_refuse_the_same_settings(tmp_path, monkeypatch, spec):
    # An empty setting is refused too: it must not fall back to the public development key.
    with pytest.raises(ConfigError):
        stack_keys(tmp_path, spec)
    monkeypatch.setenv("TURNPIKE_API_KEYS", spec)
    with pytest.raises(ConfigError):
        GatewaySettings()
