"""The ``conversation`` field of a create request: an id or ``{"id": ...}``; never with
``previous_response_id``; a wrong type names the parameter."""

from __future__ import annotations

import pytest

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create
from turnpike.gateway.protocol.response_object import new_response


def parse(**body):
    return parse_create({"model": "sim", "input": "hi", **body}, default_model="sim")


@pytest.mark.parametrize("given", ["conv_1", {"id": "conv_1"}])
def test_a_conversation_by_id_or_object(given) -> None:
    request = parse(conversation=given)
    assert request.conversation == "conv_1"
    assert new_response("resp_1", request, "sim")["conversation"] == {"id": "conv_1"}


def test_without_a_conversation_the_response_has_none() -> None:
    request = parse(conversation=None)
    assert request.conversation is None
    assert "conversation" not in new_response("resp_1", request, "sim")


@pytest.mark.parametrize(
    ("given", "param"),
    [
        (42, "conversation"),
        ("", "conversation"),
        ({}, "conversation.id"),
        ({"id": 1}, "conversation.id"),
    ],
)
def test_a_wrong_type_names_the_parameter(given, param) -> None:
    with pytest.raises(ApiError) as err:
        parse(conversation=given)
    assert (err.value.status, err.value.param) == (400, param)


def test_not_with_previous_response_id() -> None:
    with pytest.raises(ApiError) as err:
        parse(conversation="conv_1", previous_response_id="resp_1")
    assert (err.value.status, err.value.param, err.value.code) == (
        400,
        "conversation",
        "mutually_exclusive_parameters",
    )
