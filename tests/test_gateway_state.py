"""The connection-scoped cache."""

from gateway.state import ConnectionCache, ConversationState


def state(lane=None):
    return ConversationState(
        response={},
        history=[],
        proto_history=[],
        call_names={},
        conversation_id="r0",
        affinity_key="a",
        lane=lane,
    )


def test_least_recently_used_responses_leave_first():
    cache = ConnectionCache(2)
    cache.put("r1", state())
    cache.put("r2", state())
    assert cache.get("r1") is not None  # r1 is now the most recent
    cache.put("r3", state())
    assert cache.get("r2") is None and cache.get("r1") is not None and len(cache) == 2


def test_failed_continuation_evicts_only_on_the_parents_lane():
    cache = ConnectionCache(8)
    cache.put("r1", state(lane="a"))
    cache.evict_after_failure("r1", "b")  # a fork from another lane failed
    assert cache.get("r1") is not None
    cache.evict_after_failure("r1", "a")
    assert cache.get("r1") is None
    cache.evict_after_failure("missing", None)  # nothing to do, no error
