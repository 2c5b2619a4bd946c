"""The Response object (the spec's ``ResponseResource``), built from a request.

Every property the Open Responses schema requires is always present, null
where the spec allows it.
"""

from __future__ import annotations

import time
from typing import Any

from turnpike.gateway.protocol.request import CreateRequest

# Where a safety flag is recorded on the response (besides its trace).
SAFETY_METADATA_KEY = "turnpike_safety_flags"


def new_response(
    response_id: str, request: CreateRequest, model: str, safety_flags: tuple[str, ...] = ()
) -> dict[str, Any]:
    metadata = request.metadata
    if safety_flags:
        metadata = {**metadata, SAFETY_METADATA_KEY: ",".join(safety_flags)[:512]}
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "completed_at": None,
        "status": "in_progress",
        "background": request.background,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": model,
        "output": [],
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": request.prompt_cache_retention,
        "reasoning": request.reasoning,
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier,
        "store": request.store,
        "temperature": request.temperature,
        "text": request.text,
        "tool_choice": request.tool_choice,
        "tools": request.tools,
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "truncation": request.truncation,
        "usage": None,
        "user": request.user,
        "metadata": metadata,
    }
    if request.conversation is not None:
        response["conversation"] = {"id": request.conversation}
    return response


def usage(
    input_tokens: int, cached_tokens: int, output_tokens: int, reasoning_tokens: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def snapshot(response: dict[str, Any]) -> dict[str, Any]:
    """A copy safe to hand to a transport while the original keeps changing."""
    copy = dict(response)
    copy["output"] = [dict(item) for item in response["output"]]
    return copy
