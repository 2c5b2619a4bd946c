"""gRPC clients for the backend services, one channel each, opened at startup, and the
one way the gateway calls them: ``Backends.call``."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc

from turnpike.billing.v1 import billing_pb2_grpc
from turnpike.config import Endpoints
from turnpike.gateway.protocol.errors import ApiError, invalid, unavailable
from turnpike.grpc_client import check_health, insecure_channel
from turnpike.grpc_param import param_metadata
from turnpike.imageres.v1 import imageres_pb2_grpc
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.router.v1 import router_pb2_grpc
from turnpike.safety.v1 import safety_pb2_grpc
from turnpike.session.v1 import session_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2_grpc

log = logging.getLogger(__name__)

Reply = TypeVar("Reply")
# A backend status the client caused, and the API error that tells it so.
ClientErrors = Mapping[grpc.StatusCode, Callable[[Any], ApiError]]
# What gRPC says of a message over a channel's size limit (RESOURCE_EXHAUSTED): "CLIENT:
# Sent" (this end refused to send it), "SERVER: Received" (the peer refused it), "CLIENT:
# Received" (a reply over this end's limit). A service's own RESOURCE_EXHAUSTED (overload)
# says something else.
_TOO_LARGE = re.compile(
    r"(?:(CLIENT|SERVER): )?(Sent|Received) message larger than max \((\d+) vs\. (\d+)\)"
)


def message_too_large(service: str, err: grpc.aio.AioRpcError | Refused) -> ApiError | None:
    """A message over the channel's limit as the client's 400: sending the same request
    again cannot succeed, so never a 503 to retry. None for any other failure."""
    if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    found = _TOO_LARGE.search(err.details() or "")
    if found is None:
        return None
    side, verb, size, limit = found.groups()
    log.warning("%s call failed: %s", service, err.details())
    if side == "CLIENT" and verb == "Received":
        what = f"the {service} service's reply to it is {size} bytes"
    else:
        what = f"it makes a message of {size} bytes to the {service} service"
    return invalid(
        f"Your request is too large: {what}, over the limit of {limit} bytes. Send a "
        "shorter input or conversation (compact it: POST /v1/responses/compact).",
        "input",
        "input_too_large",
    )


def failure(
    service: str, err: grpc.aio.AioRpcError | Refused, client_errors: ClientErrors | None = None
) -> ApiError:
    """The API error for a failed call (or a refusal on a session stream, which carries
    what the call would have ended with): the client's to fix when ``client_errors`` lists
    its status, or a message over the size limit; else a 503 the client may retry (and a
    warning here)."""
    if (too_large := message_too_large(service, err)) is not None:
        return too_large
    if client_errors and (to_api_error := client_errors.get(err.code())):
        return to_api_error(err)
    log.warning("%s call failed: %s %s", service, err.code(), err.details())
    return unavailable(f"The {service} service is unavailable; please retry.")


class Refused:
    """A session stream's refusal (turnpike/session/v1), read as the failed call it stands
    for: its status code, details and the field at fault (``grpc_param``)."""

    def __init__(self, refusal: session_pb2.Refusal) -> None:
        self._refusal = refusal

    def code(self) -> grpc.StatusCode:
        return _STATUS_BY_NUMBER.get(self._refusal.code, grpc.StatusCode.UNKNOWN)

    def details(self) -> str:
        return self._refusal.message

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return param_metadata(self._refusal.param or None)


_STATUS_BY_NUMBER = {status.value[0]: status for status in grpc.StatusCode}


class Backends:
    def __init__(self, endpoints: Endpoints, timeout_s: float) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.safety = safety_pb2_grpc.SafetyStub(self._channel(endpoints.safety))
        self.tokenizer = tokenizer_pb2_grpc.TokenizerStub(self._channel(endpoints.tokenizer))
        self.router = router_pb2_grpc.RouterStub(self._channel(endpoints.router))
        self.billing = billing_pb2_grpc.BillingStub(self._channel(endpoints.billing))
        self.imageres = imageres_pb2_grpc.ImageResolverStub(self._channel(endpoints.imageres))

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = insecure_channel(address)
        return self._channels[address]

    def worker(self, address: str) -> inference_pb2_grpc.InferenceStub:
        """Workers come and go; one channel per address, kept for reuse."""
        return inference_pb2_grpc.InferenceStub(self._channel(address))

    async def call(
        self,
        service: str,
        method: Callable[..., Awaitable[Reply]],
        request: Any,
        client_errors: ClientErrors | None = None,
    ) -> Reply:
        """One unary call within the backend timeout. A status listed in
        ``client_errors`` is the client's to fix, and so is a message over the channel's
        size limit; any other failure is a 503 the client may retry (and a warning here)."""
        try:
            return await method(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise failure(service, err, client_errors) from None

    async def health(self) -> dict[str, bool]:
        """Health of the services the gateway needs before it is ready."""
        named = {
            "safety": self.endpoints.safety,
            "tokenizer": self.endpoints.tokenizer,
            "router": self.endpoints.router,
            "billing": self.endpoints.billing,
            "imageres": self.endpoints.imageres,
        }
        return {
            name: await check_health(self._channel(address), timeout=0.5)
            for name, address in named.items()
        }

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
