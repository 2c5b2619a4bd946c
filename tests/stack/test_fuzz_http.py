"""Property-based fuzzing of the HTTP API from the gateway's own OpenAPI document
(schemathesis, valid and invalid requests), against a real gateway process over the real
backends, with a tenant's key. The property, for every operation: no 5xx, and every 4xx
is the API's error shape, naming the request field at fault in ``param`` when one is;
and every answer is one the document describes (status, content type, body schema).

Bounded here (``FUZZ_EXAMPLES`` examples per operation, 8 by default); ``make fuzz``
runs it longer."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from support.fuzz_gateway import FuzzGateway, start_fuzz_gateway, stop_fuzz_gateway
from support.openapi_operations import operations

from turnpike.gateway.api.openapi import DOCUMENT_PATH

pytestmark = pytest.mark.stack

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))

# 4xx errors about the request as a whole, not one field: no param to name.
WHOLE_REQUEST_CODES = {
    "invalid_json",
    "invalid_body",
    "invalid_request",
    "invalid_api_key",
    "request_too_large",
    "not_found",
    "method_not_allowed",
    "rate_limit_exceeded",
}


@pytest.fixture(scope="module")
def fuzz_gateway(stack, tmp_path_factory) -> Iterator[FuzzGateway]:
    gateway = start_fuzz_gateway(stack, tmp_path_factory.mktemp("fuzz-http") / "gateway.log")
    yield gateway
    stop_fuzz_gateway(gateway)


# The committed document, the one the gateway serves (test_openapi_document checks both).
SCHEMA = schemathesis.openapi.from_path(str(DOCUMENT_PATH))
# The tenant's key goes on every request, not a generated bearer token (a wrong key's 401
# is one case, tested elsewhere; here it would hide the request's own handling).
SCHEMA.config.generation.update(with_security_parameters=False)
OPERATIONS = {operation.label: operation for operation in operations(SCHEMA)}
POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE


def _can_be_invalid(operation: Any) -> bool:
    """Whether schemathesis can make an invalid request for it: a body or a query
    parameter (a path parameter is any string: none of its values is invalid)."""
    return bool(operation.body) or any(
        p.location.value != "path" for p in operation.iter_parameters()
    )


RUNS = [
    (label, mode)
    for label, operation in sorted(OPERATIONS.items())
    for mode in (POSITIVE, NEGATIVE)
    if mode is POSITIVE or _can_be_invalid(operation)
]


def _fields(case: schemathesis.Case) -> set[str]:
    """The names a useful ``param`` may start with: the operation's parameters and the
    body's properties (declared, or sent)."""
    names = {p.name for p in case.operation.iter_parameters()}
    body = case.operation.definition.raw.get("requestBody")
    if body is not None:
        names |= _schema_properties(case, body["content"]["application/json"]["schema"])
    if isinstance(case.body, dict):
        names |= set(case.body)
    # The handlers name path parameters as the API does.
    return names | {"response_id", "conversation_id", "item_id", "model"}


def _schema_properties(case: schemathesis.Case, schema: dict[str, Any]) -> set[str]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = case.operation.schema.raw_schema["components"]["schemas"][name]
    return set(schema.get("properties", {}))


@schemathesis.check
def api_error_shape(ctx, response, case) -> None:
    """Every 4xx is ``{"error": {"message", "type", "code", "param"}}``; a 400 or a 404
    about a field names it (``param``'s first segment is a parameter of the request)."""
    if not 400 <= response.status_code < 500:
        return
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "code", "param"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
    param = error["param"]
    assert param is None or isinstance(param, str), error
    if response.status_code in (400, 404) and error["code"] not in WHOLE_REQUEST_CODES:
        assert param, f"a {response.status_code} without param: {error}"
    if param:
        root = re.split(r"[.\[]", param, maxsplit=1)[0]
        assert root in _fields(case), f"param {param!r} is no field of the request: {error}"


# Driven with hypothesis directly: schemathesis's pytest plugin does not run on this
# pytest (9.x), its strategies do.
@pytest.mark.parametrize(("label", "mode"), RUNS, ids=[f"{label}-{mode}" for label, mode in RUNS])
def test_http_api(label: str, mode: schemathesis.GenerationMode, fuzz_gateway: FuzzGateway) -> None:
    operation = OPERATIONS[label]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def request(case: schemathesis.Case) -> None:
        response = case.call(base_url=fuzz_gateway.base, headers=fuzz_gateway.headers(), timeout=30)
        case.validate_response(
            response,
            checks=[
                not_a_server_error,
                api_error_shape,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
        )

    request()
    assert fuzz_gateway.alive()
