"""The response store in process: bounded, oldest first out. The embedded default."""

from __future__ import annotations

import copy
from collections import OrderedDict

from gateway.store import StoredResponse


class InMemoryResponseStore:
    def __init__(self, max_responses: int) -> None:
        self._max = max_responses
        self._records: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()

    async def put(self, record: StoredResponse) -> None:
        key = (record.tenant, record.id)
        # Copies, so later changes by the caller never leak into what GET returns. The
        # engine reassigns top-level keys and fills ``output`` in place; what came from
        # the request (tools, text, metadata) is never changed in place, as for events
        # (response_object.snapshot).
        self._records[key] = StoredResponse(
            record.tenant,
            {**record.response, "output": copy.deepcopy(record.response["output"])},
            list(record.input_items),
            record.affinity_key,
        )
        self._records.move_to_end(key)
        while len(self._records) > self._max:
            self._records.popitem(last=False)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return self._records.get((tenant, response_id))

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._records.pop((tenant, response_id), None) is not None

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """Nothing to release."""
