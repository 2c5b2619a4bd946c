"""Settings are declared once (src/turnpike/config.py and its config_*.py
neighbours): each variable's type, range, default and description. The files that cannot
import them (.env, the Kubernetes ConfigMap, docs/settings.md) carry what `make settings`
writes from them, and every declared variable is read, and checked, as declared."""

from __future__ import annotations

import base64
import dataclasses
import re

import annotated_types
import pytest
import yaml
from support.paths import REPO_ROOT
from support.scripts import load_script

from turnpike.config import ConfigError, GatewaySettings, PdfSettings
from turnpike.config_model import EnvSettings, kind_of
from turnpike.config_reference import SECTIONS, variables

ROOT = REPO_ROOT

gen_settings = load_script("gen_settings", ROOT / "scripts" / "gen_settings.py")

# Text the group's own checks accept (any other text is taken as it is).
GOOD_TEXT = {
    "TURNPIKE_API_KEYS": "read:tenant",
    "TURNPIKE_SERVER_KEY": base64.b64encode(bytes(32)).decode(),
}
# Every declared variable with the group that reads it: (group, field name, variable).
VARIABLES = [
    (group, field_name, field.validation_alias)
    for _, groups in SECTIONS
    for group in groups
    for field_name, field in group.model_fields.items()
    if isinstance(field.validation_alias, str)
]
DECLARED = [pytest.param(*case, id=case[2]) for case in VARIABLES]
BOUNDED = [
    pytest.param(*case, id=case[2])
    for case in VARIABLES
    if any(
        isinstance(m, annotated_types.BaseMetadata) for m in case[0].model_fields[case[1]].metadata
    )
]


def test_dotenv_the_kubernetes_config_and_the_reference_are_written_from_the_declarations():
    stale = [str(p) for p, text in gen_settings.render().items() if (ROOT / p).read_text() != text]
    assert not stale, f"settings differ from src/turnpike/config.py, run `make settings`: {stale}"


def test_a_changed_default_reaches_every_file():
    declared = variables()
    changed = {
        **declared,
        "TURNPIKE_MAX_IN_FLIGHT": dataclasses.replace(
            declared["TURNPIKE_MAX_IN_FLIGHT"], default="48", shown_default="48", deployed="48"
        ),
        "TURNPIKE_API_KEYS": dataclasses.replace(declared["TURNPIKE_API_KEYS"], deployed="k:t"),
    }
    rendered = gen_settings.render(declared=changed)
    assert "\nTURNPIKE_MAX_IN_FLIGHT=48\n" in rendered[gen_settings.DOTENV]
    assert "\nTURNPIKE_API_KEYS=k:t\n" in rendered[gen_settings.DOTENV]
    documents = {d["kind"]: d for d in yaml.safe_load_all(rendered[gen_settings.K8S_CONFIG])}
    assert documents["ConfigMap"]["data"]["TURNPIKE_MAX_IN_FLIGHT"] == "48"
    assert documents["Secret"]["stringData"]["TURNPIKE_API_KEYS"] == "k:t"
    assert (
        "| `TURNPIKE_MAX_IN_FLIGHT` | integer | 0 or more | `48` | same |"
        in (rendered[gen_settings.DOCS])
    )


def test_dotenv_keeps_what_is_not_a_setting():
    """Only the settings block is generated: the ports, images and OpenTelemetry lines
    around it are left as they are, and the block holds every setting it lists once."""
    text = (ROOT / gen_settings.DOTENV).read_text()
    rendered = gen_settings.render_dotenv(text.replace("=64\n", "=1\n"), variables())
    assert rendered == text
    names = re.findall(r"(?m)^((?:TURNPIKE|CEREBRAS)_[A-Z_]+)=", text)
    assert sorted(names) == sorted(gen_settings.dotenv_names())
    for kept in ("GATEWAY_PORT=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "CHROMIUM_IMAGE="):
        assert kept in text


def test_every_variable_has_a_type_a_default_and_a_description():
    for row in variables().values():
        assert row.kind and row.description, row.name
        assert row.shown_default or row.default == "", row.name
        if row.kind in ("integer", "number"):
            assert row.range, f"{row.name}: a number needs a range"


def test_compose_passes_only_declared_settings():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    declared = variables()
    for name, service in compose["services"].items():
        for key in service.get("environment", {}):
            if key.startswith(("TURNPIKE_", "CEREBRAS_")):
                assert key in declared, f"{name}: {key} is declared nowhere"


@pytest.mark.parametrize("group, field_name, variable", DECLARED)
def test_every_variable_is_read_and_a_malformed_value_is_named(
    monkeypatch, group: type[EnvSettings], field_name: str, variable: str
):
    field = group.model_fields[field_name]
    if kind_of(field).label in ("text", "path", "list"):
        value = GOOD_TEXT.get(variable, "read")
        monkeypatch.setenv(variable, f" {value} ")
        assert value in str(getattr(group(), field_name)), variable
        return
    monkeypatch.setenv(variable, "bogus")
    # (?i): a choice is read in any case, and shown upper-cased.
    with pytest.raises(ConfigError, match=rf"(?i)^{variable}='bogus': not "):
        group()


def number(bound: object) -> int | float:
    """A bound's value (annotated_types allows anything comparable; ours are numbers)."""
    assert isinstance(bound, int | float), bound
    return bound


@pytest.mark.parametrize("group, field_name, variable", BOUNDED)
def test_a_value_out_of_range_is_refused_naming_the_variable(
    monkeypatch, group: type[EnvSettings], field_name: str, variable: str
):
    outside: list[int | float] = []
    for bound in group.model_fields[field_name].metadata:
        if isinstance(bound, annotated_types.Ge):
            outside.append(number(bound.ge) - 1)
        elif isinstance(bound, annotated_types.Gt):
            outside.append(number(bound.gt))
        elif isinstance(bound, annotated_types.Le):
            outside.append(number(bound.le) + 1)
    assert outside, variable
    for value in outside:
        monkeypatch.setenv(variable, str(value))
        with pytest.raises(ConfigError, match=rf"^{variable}='[^']+': must be "):
            group()


def test_variables_are_matched_by_their_exact_names_only(monkeypatch):
    monkeypatch.setenv("turnpike_max_in_flight", "5")
    monkeypatch.setenv("max_in_flight", "5")
    monkeypatch.setenv("pdf", '{"workers": 9}')
    settings = GatewaySettings()
    assert settings.max_in_flight == 256 and settings.pdf.workers == 2


def test_values_given_in_code_win_and_are_checked_as_variables_are(monkeypatch):
    monkeypatch.setenv("TURNPIKE_PDF_MAX_CHARS", "99")
    assert PdfSettings(max_chars=10).max_chars == 10
    with pytest.raises(ConfigError, match=r"^TURNPIKE_PDF_WORKERS='0': must be above 0"):
        PdfSettings(workers=0)


def test_the_reference_lists_every_variable_once_with_its_readers():
    text = (ROOT / gen_settings.DOCS).read_text()
    for row in variables().values():
        assert text.count(f"| `{row.name}` |") == 1, row.name
        assert row.readers, row.name
    assert variables()["TURNPIKE_IMAGERES_MAX_IMAGE_PIXELS"].readers == ("gateway", "imageres")
