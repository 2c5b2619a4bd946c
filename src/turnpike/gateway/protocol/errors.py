"""The API's error shape, one class for every transport.

HTTP bodies are ``{"error": {"message", "type", "code", "param"}}`` with all four
keys; WebSocket errors are the nested event with an integer ``status``; a
failure after streaming began becomes ``response.failed`` instead (see events).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# An error's message and param are built from client values (ids, names, types): they
# are bounded and made encodable here, so a hostile value cannot break the error path
# (a lone surrogate fails every JSON encoder; megabytes echoed back amplify the input).
MAX_MESSAGE_CHARS = 2048
MAX_PARAM_CHARS = 512
# A client value quoted in a message (``echo``): enough to recognise it.
MAX_ECHO_CHARS = 128


def safe_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with lone surrogates escaped (``\\ud800``)."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        if len(text) > limit:  # the escapes made it longer
            text = text[: limit - 1] + "…"
    return text


def echo(value: Any) -> str:
    """A client value to quote in an error message: quoted, bounded and encodable."""
    text = value if isinstance(value, str) else repr(value)
    return "'" + safe_text(text, MAX_ECHO_CHARS) + "'"


@dataclass
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.message = safe_text(self.message, MAX_MESSAGE_CHARS)
        if self.param is not None:
            self.param = safe_text(self.param, MAX_PARAM_CHARS)

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }

    def ws_event(self, stream_id: str | None = None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": "error",
            "status": self.status,
            "sequence_number": None,
            "error": {
                "type": self.type,
                "code": self.code,
                "message": self.message,
                "param": self.param,
            },
        }
        if stream_id is not None:
            event["stream_id"] = stream_id
        return event


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, code=code, param=param)


def invalid_type(param: str, expected: str) -> ApiError:
    return ApiError(
        400,
        f"Invalid type for '{param}': expected {expected}.",
        code="invalid_type",
        param=param,
    )


def missing(param: str) -> ApiError:
    return invalid(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def require_str(raw: dict[str, Any], key: str, param: str, expected: str = "a string") -> str:
    """``raw[key]``, a string the request must hold at ``param.key``."""
    value = raw.get(key)
    if value is None:
        raise missing(f"{param}.{key}")
    if not isinstance(value, str):
        raise invalid_type(f"{param}.{key}", expected)
    return value


def not_found(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(404, message, code=code, param=param)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, type="invalid_request_error", code="invalid_api_key")


def too_large(limit: int, what: str = "Request body") -> ApiError:
    return ApiError(
        413,
        f"{what} is too large: the limit is {limit} bytes.",
        code="request_too_large",
        # Retrying the same body cannot succeed.
        headers={"x-should-retry": "false"},
    )


def server_error(
    message: str = "The server had an error while processing your request.",
) -> ApiError:
    return ApiError(500, message, type="server_error", code="server_error")


def unavailable(message: str) -> ApiError:
    return ApiError(503, message, type="server_error", code="service_unavailable")


def conflict(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(409, message, code=code, param=param)


def content_blocked(categories: list[str]) -> ApiError:
    return invalid(
        f"Your request was blocked by the safety system ({', '.join(categories)}). "
        "Remove the offending content and try again.",
        "input",
        "content_policy_violation",
    )


def store_unavailable() -> ApiError:
    return unavailable("The response store is unavailable; please retry.")
