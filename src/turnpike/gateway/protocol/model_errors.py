"""A request model's validation errors as the API's 400s, and the few annotations whose
errors need the API's own code or wording. Pure: no I/O.

pydantic reports every error with a ``loc`` (``("tools", 0, "<function>", "name")``) and
a ``type`` (``missing``, ``string_type``, ``literal_error``...). ``api_error`` turns the
first into the ``ApiError`` the hand-written checks raised before the models: the
``param`` path as the API writes it (``tools[0].name``) and its ``code``:

- a missing field, or a null where a field is required: ``missing_required_parameter``
  (a null is an absent value everywhere in this API);
- a value of the wrong JSON type, or an empty one where content is needed: ``invalid_type``;
- a value outside an enum or a pattern: ``invalid_value``;
- a bound the spec states: OpenAI's messages and codes (``integer_below_min_value``,
  ``string_above_max_length``...);
- ``Between`` and ``matching``: the code and wording they carry;
- a tagged union's unknown ``type``: the refusal its ``tagged`` declares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import (
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import ErrorDetails, PydanticCustomError, core_schema

from turnpike.gateway.protocol.errors import ApiError, echo, invalid, invalid_type, missing

# The error types of the annotations below and of ``tagged`` unions.
RULE = "turnpike_rule"
UNKNOWN_KIND = "turnpike_unknown_kind"

# The JSON type a value should have had, by pydantic's error type.
EXPECTED = {
    "string_type": "a string",
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "none_required": "null",
    "string_too_short": "a non-empty string",
    "too_short": "a non-empty array",
}


@dataclass(frozen=True)
class Between:
    """A number from ``low`` to ``high`` (``high`` may be open): stated in the JSON schema
    (``minimum``, ``maximum``), refused as ``invalid_value`` naming the range."""

    low: float
    high: float | None = None
    expected: str = "a number"

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out["minimum"] = self.low
        if self.high is not None:
            out["maximum"] = self.high
        return out

    def _check(self, value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        number = handler(value)  # the type first; the range names the value as sent
        if self.low <= number and (self.high is None or number <= self.high):
            return number
        if self.high is None:
            wanted = f"expected {self.expected} of at least {self.low}"
        else:
            wanted = f"expected {self.expected} from {self.low} to {self.high}"
        raise PydanticCustomError(
            RULE, f"{value} is out of range; {wanted}", {"code": "invalid_value"}
        )


# Each pattern's refusal (``matching``), by the pattern: pydantic-core matches a pattern
# itself, far quicker than a Python check, and reports only the pattern.
_PATTERNS: dict[str, tuple[str, str]] = {}


def matching(pattern: str, message: str, code: str = "invalid_value") -> Any:
    """A string matching ``pattern`` in full: stated in the JSON schema, refused with
    ``code`` and ``message`` (what the string must be; one per pattern)."""
    anchored = f"^{pattern}$"
    if _PATTERNS.setdefault(anchored, (message, code)) != (message, code):
        raise ValueError(f"pattern {pattern!r} declared with two refusals")
    return Field(pattern=anchored)


@dataclass(frozen=True)
class _UnknownKind:
    expected: str
    unsupported: str
    code: str


# Each tagged union's refusal, by its error type (a Discriminator's context would make
# the annotation unhashable, and typing hashes the members of a union).
_UNKNOWN_KINDS: dict[str, _UnknownKind] = {}


def tagged(
    kind: str | Callable[[Any], str | None],
    expected: str,
    unsupported: str = "",
    code: str = "",
) -> Any:
    """The discriminator of a union told apart by ``kind``: ``"type"`` (its models'
    ``type``, looked up by pydantic-core itself), or a function giving a value's tag
    (``Tag("<name>")``) or None. A value of no known kind is ``invalid_type``
    (``expected``) unless it is an object: then, with ``unsupported`` (a message naming
    the ``{kind}``), ``code`` at ``<param>.type``; without, ``invalid_value`` at the
    value."""
    error_type = f"{UNKNOWN_KIND}_{len(_UNKNOWN_KINDS)}"
    _UNKNOWN_KINDS[error_type] = _UnknownKind(expected, unsupported, code)
    if kind == "type":
        return _ByType(error_type)
    if isinstance(kind, str):
        raise ValueError("a tagged union is told apart by 'type' or by a function")
    return Discriminator(kind, custom_error_type=error_type, custom_error_message="unknown kind")


@dataclass(frozen=True)
class _ByType:
    """A union discriminated by ``type``, with our error for an unknown one (pydantic's
    ``Discriminator("type", custom_error_type=...)`` drops the custom error)."""

    error_type: str

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = handler(Annotated[source, Field(discriminator="type")])
        if schema["type"] != "tagged-union":
            raise TypeError(f"{source} is no union of models told apart by 'type'")
        union = cast(core_schema.TaggedUnionSchema, schema)
        union["custom_error_type"] = self.error_type
        union["custom_error_message"] = "unknown kind"
        return union


def api_error(error: ValidationError, body: Any) -> ApiError:
    """The first of ``error``'s errors as the API's 400 (``body``: what was validated)."""
    return _one(error.errors(include_url=False)[0], body)


def _one(detail: ErrorDetails, body: Any) -> ApiError:
    kind, value, ctx = detail["type"], detail["input"], detail.get("ctx") or {}
    param = _param(detail["loc"], body, last_is_key=kind == "missing")
    if kind == "missing" or (
        value is None and kind in EXPECTED and isinstance(detail["loc"][-1], str)
    ):
        return missing(param)
    if kind in _UNKNOWN_KINDS:
        return _unknown_kind(param, value, _UNKNOWN_KINDS[kind])
    if kind == RULE:
        return invalid(f"Invalid '{param}': {detail['msg']}.", param, ctx["code"])
    if kind == "string_pattern_mismatch" and ctx["pattern"] in _PATTERNS:
        message, code = _PATTERNS[ctx["pattern"]]
        return invalid(f"Invalid '{param}': {message}.", param, code)
    if kind in EXPECTED:
        return invalid_type(param, EXPECTED[kind])
    if kind in ("literal_error", "enum"):
        return invalid(
            f"Invalid value for '{param}': {echo(value)}. Supported values are: {ctx['expected']}.",
            param,
            "invalid_value",
        )
    return _bound(kind, param, value, ctx) or invalid(
        f"Invalid '{param}': {detail['msg']}.", param, "invalid_value"
    )


def _unknown_kind(param: str, value: Any, union: _UnknownKind) -> ApiError:
    if not isinstance(value, dict):
        return invalid_type(param, union.expected)
    if not union.unsupported:
        return invalid(f"Invalid '{param}': expected {union.expected}.", param, "invalid_value")
    message = union.unsupported.format(kind=echo(value.get("type")))
    return invalid(message, f"{param}.type", union.code)


# OpenAI's messages for a bound the schema states (only integers have one: a number's
# range is a ``Between``).
_BOUNDS: Mapping[str, tuple[str, str, str]] = {
    "greater_than_equal": ("integer_below_min_value", "integer below minimum value", "ge"),
    "less_than_equal": ("integer_above_max_value", "integer above maximum value", "le"),
}


def _bound(kind: str, param: str, value: Any, ctx: dict[str, Any]) -> ApiError | None:
    if kind in _BOUNDS:
        code, what, key = _BOUNDS[kind]
        sign = ">=" if key == "ge" else "<="
        return invalid(
            f"Invalid '{param}': {what}. Expected a value {sign} {ctx[key]}, but got {value} instead.",
            param,
            code,
        )
    if kind == "string_too_long":
        return invalid(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{ctx['max_length']}, but got a string with length {len(value)} instead.",
            param,
            "string_above_max_length",
        )
    if kind == "too_long":
        return invalid(
            f"Invalid '{param}': expected at most {ctx['max_length']} entries.",
            param,
            "invalid_value",
        )
    return None


def _param(loc: tuple[int | str, ...], body: Any, *, last_is_key: bool) -> str:
    """``loc`` as the API's parameter path, walked along ``body``. A union's tag in
    ``loc`` is dropped: a ``<kind>`` tag (``tagged`` with a function), or the ``type``
    of the object it selected (``tagged("type", ...)``: no model of those has a field
    named as its own type), or any other step that is no key of the object (a union's
    member); the last step of a missing value is its key."""
    out, node = "", body
    for i, step in enumerate(loc):
        if isinstance(step, int):
            out += f"[{step}]"
            node = node[step] if isinstance(node, list) and step < len(node) else None
            continue
        is_dict = isinstance(node, dict)
        if step.startswith("<") or (is_dict and node.get("type") == step):
            continue
        if not ((is_dict and step in node) or (i == len(loc) - 1 and last_is_key)):
            continue
        out += f".{step}" if out else step
        node = node.get(step) if is_dict else None
    return out
