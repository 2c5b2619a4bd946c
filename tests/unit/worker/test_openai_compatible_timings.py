"""llama.cpp's server reports its own prefill and decode times on the last chunk
(``timings``); the OpenAI-compatible backend takes them, so a real model's figures are the
server's, not the worker's guess from the first and last delta."""

from __future__ import annotations

from openai import AsyncOpenAI

from turnpike.worker.chat_backend import ReportedTimings
from turnpike.worker.openai_compatible import OpenAICompatibleBackend

# The last chunk of a llama.cpp stream, as it sends it (trimmed to what is read).
LAST_CHUNK = {
    "choices": [],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 31, "total_tokens": 1231},
    "timings": {
        "cache_n": 950,
        "prompt_n": 250,
        "prompt_ms": 812.5,
        "predicted_n": 31,
        "predicted_ms": 790.1,
    },
}


def backend() -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend("w", AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9"))


def test_llama_cpp_timings_stand_for_prefill_and_decode() -> None:
    assert backend().reported_timings(LAST_CHUNK) == ReportedTimings(
        prefill_ms=812.5, decode_ms=790.1
    )


def test_a_server_without_timings_or_with_bad_ones_reports_none() -> None:
    b = backend()
    assert b.reported_timings({"choices": []}) is None
    assert b.reported_timings({"timings": "soon"}) is None
    odd = b.reported_timings({"timings": {"prompt_ms": -1, "predicted_ms": True}})
    assert odd == ReportedTimings()
