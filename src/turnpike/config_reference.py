"""Every environment variable the services read, as their declarations say it: the
rows of docs/settings.md and the values of .env and the Kubernetes base, which
``make settings`` (scripts/gen_settings.py) writes from them. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic.fields import FieldInfo

from turnpike.catalogue import SERVICES
from turnpike.config import (
    AdaptiveAdmissionSettings,
    BillingSettings,
    Endpoints,
    GatewaySettings,
    GrpcChannelSettings,
    GrpcServerSettings,
    ImageresSettings,
    LoggingSettings,
    PdfSettings,
    RouterSettings,
    SafetySettings,
    TokenizerSettings,
    WorkerSettings,
)
from turnpike.config_model import BOOLEAN_WORDS, EnvSettings, kind_of, number_text
from turnpike.config_shared import GRPC_SERVICES, server_settings_class

# The groups, in sections, in the order the reference lists them; a nested group
# (GatewaySettings.pdf) is listed on its own.
SECTIONS: tuple[tuple[str, tuple[type[EnvSettings], ...]], ...] = (
    ("Every service", (LoggingSettings, GrpcChannelSettings)),
    (
        "The gRPC services",
        (
            GrpcServerSettings,
            *(server_settings_class(s) for s in SERVICES if s.name in GRPC_SERVICES),
        ),
    ),
    ("The gateway", (GatewaySettings, Endpoints, PdfSettings, AdaptiveAdmissionSettings)),
    ("Images: the gateway and imageres", (ImageresSettings,)),
    ("The router", (RouterSettings,)),
    ("The worker", (WorkerSettings,)),
    ("Billing, the tokenizer and safety", (BillingSettings, TokenizerSettings, SafetySettings)),
)


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str  # its type, as the reference names it
    range: str  # the values it accepts, in words ("" for any)
    default: str  # the default as the environment would spell it ("" for empty)
    shown_default: str  # the default as the reference shows it
    deployed: str  # what .env and the Kubernetes base set it to
    description: str
    readers: tuple[str, ...]  # the services that read it
    secret: bool
    section: str  # the SECTIONS title it is listed under


def value_text(value: Any) -> str:
    """A value as an environment variable spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def range_text(field: FieldInfo) -> str:
    """The values a field accepts, in words."""
    low = high = None
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            low = f"{number_text(bound.ge)}"  # type: ignore[arg-type]
        elif isinstance(bound, annotated_types.Gt):
            low = f"above {number_text(bound.gt)}"  # type: ignore[arg-type]
        elif isinstance(bound, annotated_types.Le):
            high = number_text(bound.le)  # type: ignore[arg-type]
    kind = kind_of(field).label
    if low is not None and high is not None:
        return f"{low} to {high}"
    if low is not None:
        return f"{low} or more" if not low.startswith("above") else low
    if kind == "port":
        return "1 to 65535"
    if kind == "boolean":
        return BOOLEAN_WORDS
    if kind.startswith("one of "):
        return kind.removeprefix("one of ")
    return ""


def _variable(field: FieldInfo, readers: tuple[str, ...], section: str) -> Variable:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    kind = kind_of(field).label
    if field.default_factory is None:
        default = value_text(field.default)
        shown = default
    else:
        default = ""
        shown = str(extra["shown_default"])
    deployed = value_text(extra["deployed"]) if "deployed" in extra else default
    return Variable(
        name=str(field.validation_alias),
        kind="choice" if kind.startswith("one of ") else kind,
        range=range_text(field),
        default=default,
        shown_default=str(extra.get("shown_default", shown)),
        deployed=deployed,
        description=field.description or "",
        readers=readers,
        secret=not field.repr,
        section=section,
    )


def variables() -> dict[str, Variable]:
    """Every variable by name, in the order of SECTIONS; one read by several groups
    lists all of their readers."""
    found: dict[str, Variable] = {}
    for section, groups in SECTIONS:
        for group in groups:
            for field in group.model_fields.values():
                if not isinstance(field.validation_alias, str):
                    continue  # a nested group, or a value given in code
                row = _variable(field, group.readers, section)
                if row.name in found:
                    first = found[row.name]
                    readers = tuple(dict.fromkeys(first.readers + row.readers))
                    row = _variable(field, readers, first.section)
                found[row.name] = row
    return found
