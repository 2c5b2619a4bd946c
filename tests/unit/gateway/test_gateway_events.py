"""The sans-I/O event builder: ordering, ids and the terminal object."""

from turnpike.gateway.protocol.events import ResponseEvents
from turnpike.gateway.protocol.request import parse_create
from turnpike.gateway.protocol.response_object import new_response, usage


def _events():
    request = parse_create({"model": "m", "input": "hi"}, default_model="m")
    return ResponseEvents(new_response("resp_1", request, "m"))


def test_text_answer_sequence_matches_the_canonical_one():
    ev = _events()
    stream = [ev.created(), ev.in_progress(), *ev.start_message()]
    stream += [ev.delta("Hel"), ev.delta("lo")]
    stream += ev.finish_item()
    stream.append(ev.completed(usage(10, 0, 2)))
    assert [e["type"] for e in stream] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in stream] == list(range(len(stream)))
    assert stream[0]["response"]["status"] == "in_progress"
    assert stream[0]["response"]["output"] == []
    final = stream[-1]["response"]
    assert final["id"] == "resp_1" and final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["total_tokens"] == 12
    assert stream[6]["text"] == "Hello"
    item_ids = {e["item_id"] for e in stream if "item_id" in e}
    assert item_ids == {final["output"][0]["id"]}


def test_function_call_sequence_carries_the_arguments():
    ev = _events()
    stream = [ev.created(), *ev.start_function_call("call_1", "get_weather")]
    stream += [ev.delta('{"city":'), ev.delta('"Paris"}')]
    stream += ev.finish_item()
    stream.append(ev.completed(usage(5, 0, 4)))
    types = [e["type"] for e in stream]
    assert types == [
        "response.created",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert stream[4]["arguments"] == '{"city":"Paris"}'
    item = stream[-1]["response"]["output"][0]
    assert item["type"] == "function_call" and item["status"] == "completed"
    assert item["call_id"] == "call_1" and item["arguments"] == '{"city":"Paris"}'


def test_lifecycle_snapshots_do_not_change_after_emission():
    ev = _events()
    created = ev.created()
    ev.start_message()
    assert created["response"]["output"] == []


def test_failure_mid_item_closes_the_item_and_sets_the_error():
    ev = _events()
    ev.created()
    ev.start_message()
    ev.delta("partial")
    stream = ev.failed("server_error", "worker died")
    assert [e["type"] for e in stream][-1] == "response.failed"
    final = stream[-1]["response"]
    assert final["status"] == "failed"
    assert final["error"] == {"code": "server_error", "message": "worker died"}
    assert final["output"][0]["status"] == "incomplete"


def test_incomplete_records_the_reason():
    ev = _events()
    ev.created()
    stream = ev.incomplete("max_output_tokens", usage(1, 0, 16))
    assert stream[-1]["type"] == "response.incomplete"
    assert stream[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
