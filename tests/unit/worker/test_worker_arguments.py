from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from turnpike.worker.schema_instance import generate_arguments
from turnpike.worker.user_text import content_words, name_words

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}

SCHEMAS: dict[str, dict] = {
    "weather": WEATHER,
    "empty": {"type": "object", "properties": {}},
    "no_type": {"properties": {"q": {"type": "string"}}, "required": ["q"]},
    "strict_nested": {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "op": {"type": "string", "enum": ["eq", "lt", "gt"]},
                    "value": {"type": ["number", "null"]},
                },
                "required": ["field", "op", "value"],
                "additionalProperties": False,
            },
            "limit": {"type": ["integer", "null"]},
        },
        "required": ["filter", "limit"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "minLength": 2},
                "minItems": 3,
                "maxItems": 5,
                "uniqueItems": True,
            },
            "matrix": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
            },
            "none_allowed": {"type": "array", "maxItems": 0},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                "items": False,
            },
            "flags": {
                "type": "array",
                "items": {"type": "boolean"},
                "minItems": 2,
                "uniqueItems": True,
            },
        },
        "required": ["tags", "matrix", "none_allowed", "pair", "flags"],
    },
    "numbers": {
        "type": "object",
        "properties": {
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "number", "multipleOf": 0.25, "minimum": 10},
            "even": {"type": "integer", "multipleOf": 2, "minimum": 3, "maximum": 9},
            "negative": {"type": "integer", "maximum": -5},
            "big": {"type": "integer", "exclusiveMinimum": 1000},
            "tenth": {"type": "number", "multipleOf": 0.1, "minimum": 0.25, "maximum": 0.5},
        },
        "required": ["ratio", "step", "even", "negative", "big", "tenth"],
        "additionalProperties": False,
    },
    "combinators": {
        "type": "object",
        "properties": {
            "id": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
            "num": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer", "minimum": 5}}, "required": ["b"]},
                ]
            },
            "mode": {"const": "fast"},
            "nothing": {"type": "null"},
            "flag": {"type": "boolean", "default": False},
        },
        "required": ["id", "maybe", "num", "both", "mode", "nothing", "flag"],
    },
    "refs": {
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
            },
        },
        "type": "object",
        "properties": {
            "start": {"$ref": "#/$defs/point"},
            "end": {"$ref": "#/$defs/point"},
            "tree": {"$ref": "#/$defs/node"},
        },
        "required": ["start", "end", "tree"],
        "additionalProperties": False,
    },
    "strings": {
        "type": "object",
        "properties": {
            "short": {"type": "string", "maxLength": 3},
            "long": {"type": "string", "minLength": 40},
            "email": {"type": "string", "format": "email"},
            "when": {"type": "string", "format": "date-time"},
            "uuid": {"type": "string", "format": "uuid"},
            "path": {"type": "string"},
            "command": {"type": "string"},
            "website": {"type": "string"},
        },
        "required": ["short", "long", "email", "when", "uuid"],
        "additionalProperties": False,
    },
    "properties_bounds": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
        "required": ["c"],
        "maxProperties": 2,
    },
    "min_properties": {
        "type": "object",
        "minProperties": 2,
        "additionalProperties": {"type": "integer"},
    },
    "draft4": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3},
            "x": {"type": "number", "maximum": 0, "exclusiveMaximum": True},
        },
        "required": ["n", "x"],
    },
    "draft7_tuple": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "pair": {
                "type": "array",
                "items": [{"type": "integer"}, {"type": "string", "enum": ["x", "y"]}],
                "additionalItems": False,
                "minItems": 2,
            },
            "item": {"$ref": "#/definitions/item"},
        },
        "definitions": {
            "item": {
                "type": "object",
                "required": ["sku"],
                "properties": {"sku": {"type": "string"}},
            }
        },
        "required": ["pair", "item"],
    },
}

TEXTS = [
    "What's the weather in Paris for the next 3 days, in fahrenheit?",
    "",
    "Zürich ☕ naïve café — 東京 résumé",
    "Run `ls -la /tmp` and email me at someone@example.org about https://example.net/x",
    "1234567 -99 0.5 tags please",
]


def validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("seed", [0, 1, 42])
@pytest.mark.parametrize("all_properties", [False, True])
def test_arguments_are_valid_for_schema(
    name: str, text: str, seed: int, all_properties: bool
) -> None:
    schema = SCHEMAS[name]
    value = generate_arguments(schema, text, random.Random(seed), all_properties=all_properties)
    errors = sorted(validator(schema).iter_errors(value), key=str)
    assert not errors, f"{value!r}: {errors[0].message}"


def test_strict_tool_gets_exactly_the_allowed_keys() -> None:
    for name in ("weather", "strict_nested", "numbers", "refs", "strings"):
        schema = SCHEMAS[name]
        value = generate_arguments(schema, TEXTS[0], random.Random(0))
        assert set(value) <= set(schema["properties"])
        assert set(schema["required"]) <= set(value)


def test_values_come_from_the_user_text() -> None:
    value = generate_arguments(WEATHER, TEXTS[0], random.Random(0))
    assert value == {"city": "Paris", "unit": "fahrenheit", "days": 3}
    nyc = generate_arguments(WEATHER, "Weather in New York, in celsius", random.Random(0))
    assert nyc["city"] == "New York" and nyc["unit"] == "celsius"
    fallback = generate_arguments(WEATHER, "what is it like there", random.Random(0))
    assert fallback["city"] == "Paris"  # a plausible city when the text names none
    assert fallback["unit"] == "celsius"
    assert fallback["days"] == 3  # a typical value for a property named "days"
    # Optional properties: every one when asked for all (structured outputs).
    tools = generate_arguments(SCHEMAS["strings"], TEXTS[3], random.Random(0), all_properties=True)
    assert tools["command"] == "ls -la /tmp"
    assert tools["email"] == "someone@example.org"
    assert tools["website"] == "https://example.net/x"
    assert tools["path"] == "/tmp"
    query = generate_arguments(
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        "  find  cheap flights ",
        random.Random(0),
    )
    assert query == {"query": "find cheap flights"}


def test_same_inputs_same_arguments() -> None:
    for schema in SCHEMAS.values():
        a = generate_arguments(schema, TEXTS[0], random.Random(9))
        b = generate_arguments(schema, TEXTS[0], random.Random(9))
        assert a == b


def test_boolean_schema_true_and_missing_schema() -> None:
    assert generate_arguments(True, "x", random.Random(0)) == {}
    assert generate_arguments({}, "x", random.Random(0)) == {}


PATTERNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "ref": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "since": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "word": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2},
    },
    "required": ["zip", "ref", "since", "word"],
    "additionalProperties": False,
}


def test_a_pattern_takes_the_piece_of_the_request_that_matches() -> None:
    value = generate_arguments(PATTERNS, "Ship order FR-123 to Paris, 75001.", random.Random(0))
    # A format example stands in for a date the request does not give.
    assert value == {"zip": "75001", "ref": "FR-123", "since": "2025-01-15", "word": "order"}
    assert not list(validator(PATTERNS).iter_errors(value))


def test_a_pattern_nothing_in_the_request_matches_leaves_the_natural_value() -> None:
    text = "Weather in Paris"
    value = generate_arguments(PATTERNS, text, random.Random(0))
    unpatterned = {
        name: {k: v for k, v in prop.items() if k != "pattern"}
        for name, prop in PATTERNS["properties"].items()
    }
    plain = generate_arguments({**PATTERNS, "properties": unpatterned}, text, random.Random(0))
    assert (value["zip"], value["ref"]) == (plain["zip"], plain["ref"])


def test_word_helpers() -> None:
    assert name_words("maxResults") == ["max", "results"]
    assert name_words("get_current-weather") == ["get", "current", "weather"]
    assert content_words("What's the weather in Paris? Don't worry") == [
        "weather",
        "Paris",
        "worry",
    ]


OPTIONAL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "workdir": {"type": "string"},
        "timeout_ms": {"type": "number"},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
        "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "verbose": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ratio": {"type": "number"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def test_only_required_properties_when_the_request_names_no_other() -> None:
    value = generate_arguments(OPTIONAL, "find cheap flights to Lisbon", random.Random(0))
    assert value == {"query": "find cheap flights to Lisbon"}
    # The same schema as a structured output: every property.
    full = generate_arguments(
        OPTIONAL, "find cheap flights to Lisbon", random.Random(0), all_properties=True
    )
    assert set(full) == set(OPTIONAL["properties"])


def test_an_optional_property_is_filled_when_the_request_gives_its_value() -> None:
    text = (
        "search with workdir /srv/app, timeout_ms=2500, max results: 7, for 3 days in"
        " fahrenheit, verbose, tags please, ratio 0.25 and zip 75001"
    )
    value = generate_arguments(OPTIONAL, text, random.Random(0))
    assert value["workdir"] == "/srv/app"
    assert value["timeout_ms"] == 2500 and isinstance(value["timeout_ms"], int)
    assert value["max_results"] == 7
    assert value["days"] == 3  # the number before the name
    assert value["unit"] == "fahrenheit"  # an enum value mentioned, its name not needed
    assert value["verbose"] is True  # a boolean's name alone
    assert isinstance(value["tags"], list)  # an array named: built
    assert value["ratio"] == 0.25  # the request gives a fraction
    assert value["zip"] == "75001"
    assert not list(validator(OPTIONAL).iter_errors(value))


def test_a_named_optional_property_whose_value_does_not_fit_stays_out() -> None:
    text = "search, max_results 500, zip code unknown, no verbose, workdir is the, days"
    value = generate_arguments(OPTIONAL, text, random.Random(0))
    assert "max_results" not in value  # out of bounds
    assert "zip" not in value  # fails the pattern
    assert value["verbose"] is False  # "no verbose"
    assert "workdir" not in value  # only a stopword follows
    assert "days" not in value  # named, no number


def test_numbers_are_whole_unless_something_says_otherwise() -> None:
    schema = {
        "type": "object",
        "properties": {
            "wait": {"type": "number"},
            "half": {"type": "number", "multipleOf": 0.5, "minimum": 1.2, "maximum": 1.8},
            "inside": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "bounded": {"type": "number", "minimum": 2.5},
        },
        "required": ["wait", "half", "inside", "bounded"],
    }
    value = generate_arguments(schema, "no numbers here", random.Random(0))
    assert value["wait"] == 1 and isinstance(value["wait"], int)
    assert value["half"] == 1.5  # the only multiple in range
    assert 0 < value["inside"] < 1  # no integer fits
    assert value["bounded"] == 3 and isinstance(value["bounded"], int)
    given = generate_arguments(schema, "wait 1.5 seconds", random.Random(0))
    assert given["wait"] == 1.5  # the request's own fraction
    assert not list(validator(schema).iter_errors(given))


def test_a_description_that_lists_values_is_an_enum() -> None:
    schema = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "description": "One of: pending, in_progress, completed"},
            "mode": {"type": "string", "description": "one of `fast` or `slow`"},
        },
        "required": ["status", "mode"],
    }
    value = generate_arguments(schema, "mark it completed, go slow", random.Random(0))
    assert value == {"status": "completed", "mode": "slow"}
    assert generate_arguments(schema, "x", random.Random(0)) == {
        "status": "pending",
        "mode": "fast",
    }
