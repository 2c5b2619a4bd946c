"""How a setting is declared and read: the mechanism under ``turnpike.config``.

A settings class is a pydantic-settings model whose every field is one environment
variable, declared once with ``setting``: its name, type, range, default and
description. The same declarations are read at start-up (``EnvSettings``) and turned
into the reference of docs/settings.md and the defaults of .env and the Kubernetes base
(``turnpike.config_reference``, ``make settings``).

Reading keeps the rules every service has always had: a value is trimmed, and an empty
one means the default (but for plain text, which is taken as written); integers,
numbers and booleans are read as Python reads them; and a bad value raises
``ConfigError`` naming the variable and its value.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError, PydanticUndefined
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import EnvSettingsSource


class ConfigError(ValueError):
    """A setting that cannot work. The message names the variable and its value
    (``TURNPIKE_X='12k': not an integer``), so it reads well on its own: every entry
    point prints it as "<service>: configuration error: <message>" and exits 2
    (``exit_on_config_error``). Services raise it for their own checks too."""

    @classmethod
    def invalid(cls, variable: str, value: str, problem: str) -> ConfigError:
        return cls(f"{variable}={value!r}: {problem}")


@contextmanager
def exit_on_config_error(service: str) -> Iterator[None]:
    """Around a service's entry point: a ConfigError becomes one line on stderr and exit
    code 2, with no traceback (nothing in it is the code's fault)."""
    try:
        yield
    except ConfigError as exc:
        print(f"{service}: configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


# -- the types: how a variable's text becomes a value ---------------------------------------


@dataclass(frozen=True)
class Kind:
    """A variable's type as the reference names it, and whether an empty (or blank)
    value means the default rather than itself."""

    label: str
    empty_is_default: bool = True


def _parser(parse: Callable[[str], Any], problem: str) -> BeforeValidator:
    """Text from the environment parsed by ``parse`` (values given in code pass as they
    are); ValueError becomes the error the variable is named with."""

    def validate(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse(value.strip())
        except ValueError:
            raise PydanticCustomError("setting", problem) from None

    return BeforeValidator(validate)


def _boolean(raw: str) -> bool:
    word = raw.lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _port(raw: str) -> int:
    port = int(raw)
    if not 1 <= port <= 65535:
        raise ValueError(raw)
    return port


def _address(raw: str) -> str:
    host, colon, port = raw.rpartition(":")
    if not colon or not host:
        raise ValueError(raw)
    _port(port)
    return raw


def _comma_list(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return [part.strip() for part in value.split(",") if part.strip()]


def _trimmed(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


BOOLEAN_WORDS = "true/false, yes/no, on/off, 1/0"
Integer = Annotated[int, Kind("integer"), _parser(int, "not an integer")]
Number = Annotated[float, Kind("number"), _parser(float, "not a number")]
Flag = Annotated[bool, Kind("boolean"), _parser(_boolean, f"not a boolean ({BOOLEAN_WORDS})")]
Port = Annotated[int, Kind("port"), _parser(_port, "not a port (1-65535)")]
Address = Annotated[str, Kind("host:port"), _parser(_address, "not host:port")]
# Taken as written: an empty value is itself, not the default.
Text = Annotated[str, Kind("text", empty_is_default=False)]
# Trimmed, and empty when blank (a file, a key: empty means "none").
TrimmedText = Annotated[str, Kind("text", empty_is_default=False), BeforeValidator(_trimmed)]
# A path: trimmed, and the default when blank.
PathText = Annotated[str, Kind("path"), BeforeValidator(_trimmed)]
# Comma separated; empty is an empty list.
CommaList = Annotated[
    list[str], Kind("list", empty_is_default=False), NoDecode, BeforeValidator(_comma_list)
]


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


def one_of(*choices: str) -> Any:
    """A word from ``choices``, in any case: upper-cased first (an error shows it so)."""

    def validate(word: str) -> str:
        if word not in choices:
            listed = ", ".join(choices)
            raise PydanticCustomError(
                "setting", "not one of {listed}", {"listed": listed, "shown": word}
            )
        return word

    return Annotated[
        str, Kind("one of " + ", ".join(choices)), BeforeValidator(_upper), AfterValidator(validate)
    ]


# -- the declaration ---------------------------------------------------------------------------


def setting(
    variable: str,
    default: Any = PydanticUndefined,
    description: str = "",
    *,
    default_factory: Callable[..., Any] | None = None,
    shown_default: str | None = None,
    deployed: Any = None,
    secret: bool = False,
    **constraints: Any,
) -> Any:
    """One environment variable: ``default`` (or ``default_factory``, with
    ``shown_default`` saying what it gives), a range as pydantic constraints (``ge``,
    ``gt``, ``le``), and a description. ``deployed`` is the value .env and the
    Kubernetes base give it when the containers' limits call for another than the
    default; ``secret`` keeps the value out of reprs."""
    extra: dict[str, Any] = {}
    if shown_default is not None:
        extra["shown_default"] = shown_default
    if deployed is not None:
        extra["deployed"] = deployed
    if default_factory is not None:
        return Field(
            default_factory=default_factory,
            validation_alias=variable,
            description=description,
            repr=not secret,
            json_schema_extra=extra or None,
            **constraints,
        )
    return Field(
        default,
        validation_alias=variable,
        description=description,
        repr=not secret,
        json_schema_extra=extra or None,
        **constraints,
    )


def kind_of(field: FieldInfo) -> Kind:
    return next((m for m in field.metadata if isinstance(m, Kind)), Kind("text", False))


# -- reading ----------------------------------------------------------------------------------


class _VariablesSource(EnvSettingsSource):
    """The environment, read by each field's own variable only (never by field name, so
    nested groups and values given in code cannot be set by a stray variable); a blank
    value is no value where the field's kind says so."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        variable = field.validation_alias
        if not isinstance(variable, str):
            return None, field_name, False
        raw = self.env_vars.get(variable)
        if raw is not None and not raw.strip() and kind_of(field).empty_is_default:
            raw = None
        return raw, variable, False


def number_text(value: float) -> str:
    """A bound or a default as people write it: 10, not 10.0."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def range_problem(error_type: str, bound: float) -> str | None:
    """The words for a range a value is outside of (None for any other error)."""
    text = number_text(bound)
    return {
        "greater_than_equal": "must be 0 or more" if bound == 0 else f"must be at least {text}",
        "greater_than": f"must be above {text}",
        "less_than_equal": f"must be {text} or less",
        "less_than": f"must be below {text}",
    }.get(error_type)


def _shown(value: Any) -> str:
    """A value as an error shows it: text as given, anything parsed as Python prints it."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value if isinstance(value, str) else str(value)


class EnvSettings(BaseSettings):
    """A group of settings read from the environment when constructed; keyword
    arguments (by field name) override what the environment says. Frozen.

    ``readers`` names the services that read the group (the reference lists them);
    ``check`` is for rules across fields, run after every field was read."""

    readers: ClassVar[tuple[str, ...]] = ()

    model_config = SettingsConfigDict(
        # Built when first read: a service builds only the groups it reads.
        defer_build=True,
        frozen=True,
        case_sensitive=True,
        validate_by_name=True,
        validate_by_alias=True,
        validate_default=False,
        extra="forbid",
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise self._config_error(err) from None
        self.check()

    def check(self) -> None:
        """Rules across fields; raise ConfigError."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _VariablesSource(settings_cls)

    @classmethod
    def variable_of(cls, key: str) -> str:
        """The variable behind a field, by its name or its variable."""
        field = cls.model_fields.get(key)
        alias = field.validation_alias if field is not None else None
        return alias if isinstance(alias, str) else key

    @classmethod
    def _config_error(cls, err: ValidationError) -> ConfigError:
        """The first error, as ConfigError: a ConfigError raised while reading (a nested
        group's) as it is; else the variable, its value and what is wrong with it."""
        first = err.errors(include_url=False)[0]
        cause = first.get("ctx", {}).get("error")
        if isinstance(cause, ConfigError):
            return cause
        variable = cls.variable_of(str(first["loc"][0])) if first["loc"] else cls.__name__
        bounds = [v for k, v in first.get("ctx", {}).items() if k in ("ge", "gt", "le", "lt")]
        problem = (bounds and range_problem(first["type"], bounds[0])) or first["msg"]
        shown = first.get("ctx", {}).get("shown", first["input"])
        return ConfigError.invalid(variable, _shown(shown), problem)
