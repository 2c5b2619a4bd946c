"""``python -m turnpike.safety``: the safety classification service."""

from __future__ import annotations

import grpc

from turnpike.config import GrpcServerSettings, SafetySettings, exit_on_config_error
from turnpike.grpc_server import configure_logging, run
from turnpike.safety.classifier import ProfanityClassifier
from turnpike.safety.engine import SafetyEngine
from turnpike.safety.policy import Thresholds
from turnpike.safety.server import SafetyServicer
from turnpike.safety.state import ConversationStore
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc
from turnpike.session_server import SessionLimit


def main() -> None:
    configure_logging()
    server_settings = GrpcServerSettings.for_service("safety")
    settings = SafetySettings()
    # The model loads here, before the server starts and reports SERVING.
    engine = SafetyEngine(
        ProfanityClassifier(),
        Thresholds.from_settings(settings),
        ConversationStore(settings.state_max_conversations),
    )
    servicer = SafetyServicer(engine, SessionLimit(server_settings.max_sessions))

    def register(server: grpc.aio.Server) -> None:
        safety_pb2_grpc.add_SafetyServicer_to_server(servicer, server)

    run(
        "safety",
        [safety_pb2.DESCRIPTOR.services_by_name["Safety"].full_name],
        register,
        server_settings,
    )


if __name__ == "__main__":
    with exit_on_config_error("safety"):
        main()
