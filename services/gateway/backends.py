"""gRPC clients for the backend services, one channel each, opened at startup."""

from __future__ import annotations

import grpc
from turnpike.billing.v1 import billing_pb2_grpc
from turnpike.config import Endpoints
from turnpike.grpc_client import check_health, insecure_channel
from turnpike.imageres.v1 import imageres_pb2_grpc
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.router.v1 import router_pb2_grpc
from turnpike.safety.v1 import safety_pb2_grpc
from turnpike.tokenizer.v1 import tokenizer_pb2_grpc


class Backends:
    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
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
