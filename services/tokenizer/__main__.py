"""``python -m tokenizer``: the harmony rendering service."""

from __future__ import annotations

import grpc
from turnpike.config import GrpcServerSettings
from turnpike.grpc_server import configure_logging, run
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc

from tokenizer.render import Renderer
from tokenizer.server import TokenizerServicer


def main() -> None:
    configure_logging()
    # Load the vocabulary before serving: a missing or corrupt vocabulary fails the start.
    servicer = TokenizerServicer(Renderer())

    def register(server: grpc.aio.Server) -> None:
        tokenizer_pb2_grpc.add_TokenizerServicer_to_server(servicer, server)

    run(
        "tokenizer",
        [tokenizer_pb2.DESCRIPTOR.services_by_name["Tokenizer"].full_name],
        register,
        GrpcServerSettings.for_service("tokenizer"),
    )


if __name__ == "__main__":
    main()
