"""The response store in process: bounded, oldest stored first out. The embedded default."""

from __future__ import annotations

import copy

from turnpike.gateway.state.responses import StoredResponse
from turnpike.lru import LruCache


class InMemoryResponseStore:
    def __init__(self, max_responses: int) -> None:
        # Reads do not refresh a response: the oldest stored leaves first.
        self._records: LruCache[tuple[str, str], StoredResponse] = LruCache(max_responses)

    async def put(self, record: StoredResponse) -> None:
        # Copies, so later changes by the caller never leak into what GET returns. The
        # engine reassigns top-level keys and fills ``output`` in place; what came from
        # the request (tools, text, metadata) is never changed in place, as for events
        # (response_object.snapshot).
        copied = StoredResponse(
            record.tenant,
            {**record.response, "output": copy.deepcopy(record.response["output"])},
            list(record.input_items),
            record.affinity_key,
        )
        self._records.put((record.tenant, record.id), copied)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return self._records.peek((tenant, response_id))

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._records.pop((tenant, response_id)) is not None

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """Nothing to release."""
