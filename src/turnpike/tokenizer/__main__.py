"""``python -m turnpike.tokenizer``: the harmony rendering service."""

from __future__ import annotations

import grpc

from turnpike.config import GrpcServerSettings, TokenizerSettings, exit_on_config_error
from turnpike.grpc_server import configure_logging, run
from turnpike.session_server import SessionLimit
from turnpike.tokenizer.render import Renderer
from turnpike.tokenizer.server import TokenizerServicer
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc


def main() -> None:
    configure_logging()
    server_settings = GrpcServerSettings.for_service("tokenizer")
    # Load the vocabulary before serving: a missing or corrupt vocabulary fails the start.
    servicer = TokenizerServicer(
        Renderer(), TokenizerSettings().max_chars, SessionLimit(server_settings.max_sessions)
    )

    def register(server: grpc.aio.Server) -> None:
        tokenizer_pb2_grpc.add_TokenizerServicer_to_server(servicer, server)

    run(
        "tokenizer",
        [tokenizer_pb2.DESCRIPTOR.services_by_name["Tokenizer"].full_name],
        register,
        server_settings,
    )


if __name__ == "__main__":
    with exit_on_config_error("tokenizer"):
        main()
