"""The gateway's caches: the connection-scoped cache of WebSocket mode, and the sprint's
rendered tokens and model configurations."""

from array import array

from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.gateway.state.conversation_state import ConversationState, RenderedPrefix
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.router.v1 import router_pb2


def prefix(tokens: int, items: int = 1) -> RenderedPrefix:
    return RenderedPrefix("h", array("I", range(tokens)), items, array("I"))


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


def test_token_cache_is_bounded_by_tokens_and_scoped_by_tenant():
    cache = TokenCache(max_tokens=10)
    cache.put("t1", "r1", prefix(6, 2))
    cache.put("t1", "r2", prefix(3, 1))
    assert cache.get("t2", "r1") is None
    assert cache.get("t1", "r1") is not None  # r1 now most recent
    cache.put("t1", "r3", prefix(4, 1))
    assert cache.get("t1", "r2") is None and cache.held_tokens == 10


def test_token_cache_holds_a_render_kept_under_two_keys_once():
    """Sprint keeps a parentless render under its response id and its content key."""
    cache = TokenCache(max_tokens=10)
    rendered = prefix(6, 2)
    cache.put("t1", "resp_1", rendered)
    cache.put("t1", "content:abc", rendered)
    assert cache.held_tokens == 6 and cache.get("t1", "resp_1") is rendered
    cache.put("t1", "r2", prefix(4, 1))
    assert cache.held_tokens == 10
    cache.put("t1", "r3", prefix(4, 1))
    # Evicting one key of the shared render frees nothing; evicting both frees it.
    assert cache.get("t1", "resp_1") is None and cache.get("t1", "content:abc") is None
    assert cache.held_tokens == 8


def test_model_cache_expires():
    cache = ModelConfigCache(ttl_s=0.0)
    cache.put("m", router_pb2.ModelConfig(id="m"))
    assert cache.get("m") is None
    cache = ModelConfigCache(ttl_s=60)
    model = router_pb2.ModelConfig(id="m")
    cache.put("m", model)
    assert cache.get("m") is model
