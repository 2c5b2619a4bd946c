"""The last request of each conversation a worker may be asked to continue, so that a
turn sends only what is new (``GenerateRequest.continues``, inference.proto).

Over a WebSocket the gateway sends a conversation's turns to the same worker (the route
is reused) and marks each request ``keep``. The next turn then carries only the items
after the kept request's and the prompt tokens after its prompt: the whole conversation
(tens of kilobytes of items, a prompt of thousands of tokens) is no longer encoded by the
gateway, sent and decoded here on every turn. This is the source design's "token cache
appended", on the far side of the hop.

Kept requests are bounded in bytes (least recently kept forgotten first); a continuation
takes its request out (a conversation keeps one: its newest). Free of I/O.
"""

from __future__ import annotations

from collections import OrderedDict

from turnpike import token_bytes
from turnpike.inference.v1 import inference_pb2 as pb


class UnknownContinuation(Exception):
    """The request continues one this worker does not hold (or not as it says)."""


class Continuations:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[str, tuple[pb.GenerateRequest, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def resolve(self, request: pb.GenerateRequest) -> pb.GenerateRequest:
        """The whole request: ``request`` itself, rebuilt in place when it is a
        continuation; ``UnknownContinuation`` when the request it continues is not here
        (or is another tenant's or model's, or shorter than it says)."""
        if not request.continues:
            return request
        found = self._kept.pop(request.continues, None)
        if found is None:
            raise UnknownContinuation(f"request {request.continues!r} is not kept here")
        kept, size = found
        self.bytes -= size
        prefix_bytes = request.continued_tokens * token_bytes.TOKEN_BYTES
        if (
            kept.tenant != request.tenant
            or kept.model != request.model
            or len(kept.items) != request.continued_items
            or len(kept.prompt) < prefix_bytes
            or request.continued_tokens < 0
        ):
            raise UnknownContinuation(f"request {request.continues!r} does not match")
        tail = list(request.items)
        del request.items[:]
        request.items.extend(kept.items)  # one call, the copies in C
        request.items.extend(tail)
        request.prompt = kept.prompt[:prefix_bytes] + request.prompt
        request.ClearField("continues")
        request.ClearField("continued_items")
        request.ClearField("continued_tokens")
        return request

    def keep(self, request: pb.GenerateRequest) -> None:
        """Keep a whole request marked ``keep`` for its conversation's next turn."""
        if not request.keep:
            return
        size = request.ByteSize()
        if size > self.max_bytes:
            return
        if (old := self._kept.pop(request.request_id, None)) is not None:
            self.bytes -= old[1]
        self._kept[request.request_id] = (request, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._kept.popitem(last=False)
            self.bytes -= dropped
