"""Write the gateway's OpenAPI document (src/turnpike/gateway/api/openapi.json) from the
models that validate its requests and from the Open Responses schemas
(specs/openresponses-openapi.json).

The create bodies are the models' (turnpike.gateway.protocol.create_body: the spec's
body with Turnpike's fields; ``model_json_schema``), so the document states what the
server accepts (tests/unit/gateway/test_request_agreement.py checks it). The rest is the
spec's: the response object and the streaming events, its two paths moved under ``/v1``;
and the paths it lacks (retrieve, delete, cancel, input items, input tokens,
conversations, models, usage, health) written here in the API's shapes. Schemas no path
refers to are left out.

The handlers read raw bodies (bounded before they are parsed: turnpike.gateway.protocol.bounds),
so FastAPI does not describe them; the document is a file, written here, served as it is.
Run through ``make openapi`` after changing a route, a model or the spec;
``tests/stack/test_openapi_document.py`` renders it the same way and fails when the committed
file differs, or when it lists a route the app does not have (or misses one).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from turnpike.gateway.protocol.create_body import (
    CompactBody,
    CreateBody,
    WebSocketResponseCreateEvent,
)
from turnpike.gateway.protocol.item_models import InputItem

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "specs" / "openresponses-openapi.json"
OUTPUT = ROOT / "src" / "turnpike" / "gateway" / "api" / "openapi.json"

Schema = dict[str, Any]
REF_TEMPLATE = "#/components/schemas/{model}"


def ref(name: str) -> Schema:
    return {"$ref": REF_TEMPLATE.format(model=name)}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


# The item kinds the gateway stores (turnpike.gateway.protocol.items.normalize_item), each by the spec's
# schema of that item as the API returns it.
STORED_ITEMS = {
    "message": "Message",
    "function_call": "FunctionCall",
    "function_call_output": "FunctionCallOutput",
    "reasoning": "ReasoningBody",
    "compaction": "CompactionBody",
}

# Schemas the spec lacks, in the shapes the handlers answer (src/turnpike/gateway/api/*_api.py).
OWN_SCHEMAS: dict[str, Schema] = {
    "ApiError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code", "param"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "code": nullable({"type": "string"}),
                    "param": nullable({"type": "string"}),
                },
            }
        },
    },
    "DeletedResponse": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["response"]},
            "deleted": {"type": "boolean"},
        },
    },
    "StoredItem": {
        "description": "An input or conversation item as stored: the canonical shape of an "
        "ItemParam, with an id.",
        "oneOf": [ref(name) for name in STORED_ITEMS.values()],
        "discriminator": {
            "propertyName": "type",
            "mapping": {kind: ref(name)["$ref"] for kind, name in STORED_ITEMS.items()},
        },
    },
    "ItemList": {
        "type": "object",
        "required": ["object", "data", "first_id", "last_id", "has_more"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": ref("StoredItem")},
            "first_id": nullable({"type": "string"}),
            "last_id": nullable({"type": "string"}),
            "has_more": {"type": "boolean"},
        },
    },
    "InputTokens": {
        "type": "object",
        "required": ["object", "input_tokens"],
        "properties": {
            "object": {"type": "string", "enum": ["response.input_tokens"]},
            "input_tokens": {"type": "integer", "minimum": 0},
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["model"]},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": ref("Model")},
        },
    },
    "UsageTotals": {
        "type": "object",
        "required": ["object", "tenant", "responses", "input_tokens", "output_tokens"],
        "properties": {
            "object": {"type": "string", "enum": ["usage"]},
            "tenant": {"type": "string"},
            "responses": {"type": "integer"},
            "input_tokens": {"type": "integer"},
            "cached_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "pending_events": {"type": "integer"},
            "by_model": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Conversation": {
        "type": "object",
        "required": ["id", "object", "created_at", "metadata"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["conversation"]},
            "created_at": {"type": "integer"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "ConversationDeleted": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["conversation.deleted"]},
            "deleted": {"type": "boolean"},
        },
    },
    "ConversationCreateBody": {
        "type": "object",
        "properties": {
            "items": nullable({"type": "array", "maxItems": 20, "items": ref("InputItem")}),
            "metadata": nullable(ref("MetadataParam")),
        },
    },
    "ConversationUpdateBody": {
        "type": "object",
        "required": ["metadata"],
        "properties": {"metadata": nullable(ref("MetadataParam"))},
    },
    "ConversationItemsBody": {
        "type": "object",
        "required": ["items"],
        "properties": {
            "items": {"type": "array", "minItems": 1, "maxItems": 20, "items": ref("InputItem")}
        },
    },
    "Health": {"type": "object", "properties": {"status": {"type": "string"}}},
    "Readiness": {
        "type": "object",
        "required": ["ready"],
        "properties": {"ready": {"type": "boolean"}},
    },
}


def json_body(schema: Schema, required: bool = True) -> Schema:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def answers(schema: Schema, description: str = "Success", *extra: int) -> Schema:
    """A 200 of ``schema``, and the API's error shape for every 4xx."""
    out: Schema = {
        "200": {"description": description, "content": {"application/json": {"schema": schema}}},
        "4XX": {
            "description": "The request is at fault (the error names the parameter).",
            "content": {"application/json": {"schema": ref("ApiError")}},
        },
    }
    for status in extra:
        out[str(status)] = {
            "description": "Unavailable: a backend or the store cannot answer now.",
            "content": {"application/json": {"schema": ref("ApiError")}},
        }
    return out


def path_param(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def query(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema}


PAGING = [
    query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
    query("order", {"type": "string", "enum": ["asc", "desc"]}),
    query("after", {"type": "string"}),
]


def operation(op_id: str, summary: str, responses: Schema, **more: Any) -> Schema:
    return {"operationId": op_id, "summary": summary, "responses": responses, **more}


def _type_values(variant: Schema, schemas: dict[str, Schema], prop: str) -> list[str]:
    """The values of ``prop`` (``type``) that select ``variant``: its enum or const."""
    target = schemas[variant["$ref"].rsplit("/", 1)[-1]] if "$ref" in variant else variant
    field = target.get("properties", {}).get(prop, {})
    return list(field.get("enum", [])) or ([field["const"]] if "const" in field else [])


def add_discriminator_mappings(node: Any, schemas: dict[str, Schema]) -> None:
    """The spec's discriminators name ``type`` without a mapping, which OpenAPI reads as
    "the value is the schema's name" (``Message``, not ``message``). Map each value of a
    variant's ``type`` to the variant, where every variant has its values."""
    if isinstance(node, list):
        for item in node:
            add_discriminator_mappings(item, schemas)
        return
    if not isinstance(node, dict):
        return
    discriminator = node.get("discriminator")
    variants = node.get("oneOf") or node.get("anyOf")
    if discriminator and variants and "mapping" not in discriminator:
        refs = [v for v in variants if "$ref" in v]
        values = [_type_values(v, schemas, discriminator["propertyName"]) for v in refs]
        if refs and len(refs) == len(variants) and all(values):
            discriminator["mapping"] = {
                value: ref["$ref"] for ref, vs in zip(refs, values, strict=True) for value in vs
            }
    for value in node.values():
        add_discriminator_mappings(value, schemas)


class _Untitled(GenerateJsonSchema):
    """The models' JSON schema without a title on every field (the spec has none)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def model_schemas() -> dict[str, Schema]:
    """The request models' schemas, by name: the create bodies and an input item."""
    models = [CreateBody, CompactBody, WebSocketResponseCreateEvent]
    _, defs = models_json_schema(
        [(model, "validation") for model in models],
        ref_template=REF_TEMPLATE,
        schema_generator=_Untitled,
    )
    item = TypeAdapter(InputItem).json_schema(ref_template=REF_TEMPLATE, schema_generator=_Untitled)
    return {**defs["$defs"], **item.pop("$defs"), "InputItem": item}


def referenced(document: dict[str, Any]) -> set[str]:
    """The names of the schemas the document's paths refer to, directly or not."""
    schemas = document["components"]["schemas"]
    names: set[str] = set()
    pending: list[Any] = [document["paths"]]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            target = node.get("$ref", "")
            if isinstance(target, str) and target.startswith("#/components/schemas/"):
                name = target.rsplit("/", 1)[-1]
                if name not in names:
                    names.add(name)
                    pending.append(schemas[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return names


def build(spec: dict[str, Any]) -> dict[str, Any]:
    """The gateway's document: the request models' schemas, ``spec``'s other components
    and two paths, and the rest by hand."""
    spec = copy.deepcopy(spec)
    add_discriminator_mappings(spec, spec["components"]["schemas"])
    paths = spec["paths"]
    create = copy.deepcopy(paths["/responses"]["post"])
    create["requestBody"] = json_body(ref("CreateBody"))  # JSON only, as served
    create["responses"]["4XX"] = answers({})["4XX"]
    compact = copy.deepcopy(paths["/responses/compact"]["post"])
    compact["requestBody"] = json_body(ref("CompactBody"))
    compact["responses"]["4XX"] = answers({})["4XX"]
    response_id = [path_param("response_id")]
    conversation_id = [path_param("conversation_id")]
    item_id = [*conversation_id, path_param("item_id")]
    public = {"security": []}

    doc_paths: dict[str, Any] = {
        "/v1/responses": {
            "post": create,
            "x-openresponses-websocket": {
                **paths["/responses"]["x-openresponses-websocket"],
                "clientMessage": ref("WebSocketResponseCreateEvent"),
            },
        },
        "/v1/responses/{response_id}": {
            "get": operation(
                "getResponse",
                "Retrieve a stored response (or, with stream=true, replay a background one's events)",
                answers(ref("ResponseResource")),
                parameters=[
                    *response_id,
                    query("stream", {"type": "boolean"}),
                    query("starting_after", {"type": "integer", "minimum": -1}),
                ],
            ),
            "delete": operation(
                "deleteResponse",
                "Delete a stored response",
                answers(ref("DeletedResponse")),
                parameters=response_id,
            ),
        },
        "/v1/responses/{response_id}/cancel": {
            "post": operation(
                "cancelResponse",
                "Cancel a background response",
                answers(ref("ResponseResource")),
                parameters=response_id,
            )
        },
        "/v1/responses/{response_id}/input_items": {
            "get": operation(
                "listInputItems",
                "The input items of a stored response, in pages",
                answers(ref("ItemList")),
                parameters=[*response_id, *PAGING],
            )
        },
        "/v1/responses/input_tokens": {
            "post": operation(
                "countInputTokens",
                "The tokens a create request's input renders to",
                answers(ref("InputTokens")),
                requestBody=json_body(ref("CreateBody")),
            )
        },
        "/v1/responses/compact": {"post": compact},
        "/v1/conversations": {
            "post": operation(
                "createConversation",
                "Create a conversation",
                answers(ref("Conversation")),
                requestBody=json_body(ref("ConversationCreateBody"), required=False),
            )
        },
        "/v1/conversations/{conversation_id}": {
            "get": operation(
                "getConversation",
                "Retrieve a conversation",
                answers(ref("Conversation")),
                parameters=conversation_id,
            ),
            "post": operation(
                "updateConversation",
                "Replace a conversation's metadata",
                answers(ref("Conversation")),
                parameters=conversation_id,
                requestBody=json_body(ref("ConversationUpdateBody")),
            ),
            "delete": operation(
                "deleteConversation",
                "Delete a conversation",
                answers(ref("ConversationDeleted")),
                parameters=conversation_id,
            ),
        },
        "/v1/conversations/{conversation_id}/items": {
            "get": operation(
                "listConversationItems",
                "A conversation's items, in pages",
                answers(ref("ItemList")),
                parameters=[*conversation_id, *PAGING],
            ),
            "post": operation(
                "addConversationItems",
                "Add items to a conversation",
                answers(ref("ItemList")),
                parameters=conversation_id,
                requestBody=json_body(ref("ConversationItemsBody")),
            ),
        },
        "/v1/conversations/{conversation_id}/items/{item_id}": {
            "get": operation(
                "getConversationItem",
                "Retrieve a conversation's item",
                answers(ref("StoredItem")),
                parameters=item_id,
            ),
            "delete": operation(
                "deleteConversationItem",
                "Delete a conversation's item (answers the conversation)",
                answers(ref("Conversation")),
                parameters=item_id,
            ),
        },
        "/v1/models": {
            "get": operation(
                "listModels", "The models served", answers(ref("ModelList"), "Success", 503)
            )
        },
        "/v1/models/{model_id}": {
            "get": operation(
                "getModel",
                "One model",
                answers(ref("Model"), "Success", 503),
                parameters=[path_param("model_id")],
            )
        },
        "/v1/usage": {
            "get": operation(
                "getUsage",
                "The caller's billed totals",
                answers(ref("UsageTotals"), "Success", 503),
            )
        },
        "/healthz": {"get": operation("healthz", "Liveness", answers(ref("Health")), **public)},
        "/readyz": {
            "get": operation(
                "readyz",
                "Readiness (503 while a backend is down)",
                answers(ref("Readiness"), "Ready", 503),
                **public,
            )
        },
        "/dashboard": {
            "get": {
                "operationId": "dashboard",
                "summary": "The live dashboard (HTML)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The page",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/dashboard/data": {
            "get": operation(
                "dashboardData", "The dashboard's figures", answers({"type": "object"}), **public
            )
        },
        "/openapi.json": {
            "get": operation("openapi", "This document", answers({"type": "object"}), **public)
        },
    }
    document = {
        "openapi": spec["openapi"],
        "info": {
            "title": "Turnpike",
            "version": "1",
            "description": "The Turnpike gateway: the OpenAI Responses API over HTTP, SSE and "
            "WebSocket. Schemas from the Open Responses specification.",
        },
        "servers": [{"url": "/"}],
        "security": [{"ApiKeyAuth": []}],
        "paths": doc_paths,
        "components": {
            # The models' schemas over the spec's of the same name: those are generated
            # from the spec (openresponses), or Turnpike's request-side own.
            "schemas": {**spec["components"]["schemas"], **model_schemas(), **OWN_SCHEMAS},
            "securitySchemes": spec["components"]["securitySchemes"],
        },
    }
    used = referenced(document)
    schemas = document["components"]["schemas"]
    document["components"]["schemas"] = {k: v for k, v in schemas.items() if k in used}
    return document


def render() -> str:
    return json.dumps(build(json.loads(SPEC.read_text())), indent=1, sort_keys=True) + "\n"


def main() -> int:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
