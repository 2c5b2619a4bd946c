"""The operations of an OpenAPI document as schemathesis loads them."""

from __future__ import annotations

from typing import Any

from schemathesis import APIOperation, BaseSchema
from schemathesis.core.result import Ok


def operations(schema: BaseSchema) -> list[APIOperation[Any, Any, Any, Any]]:
    """Every operation of ``schema``; one that does not load fails the test with its error."""
    loaded = []
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            raise result.err()
        loaded.append(result.ok())
    return loaded
