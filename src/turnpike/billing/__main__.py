"""``python -m turnpike.billing``: the usage ledger service."""

from __future__ import annotations

import logging

import grpc

from turnpike.billing.server import BillingServicer, LedgerThread
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc
from turnpike.config import BillingSettings, GrpcServerSettings, exit_on_config_error
from turnpike.grpc_server import configure_logging, run

log = logging.getLogger("billing")


def main() -> None:
    configure_logging()
    server_settings = GrpcServerSettings.for_service("billing")
    settings = BillingSettings()
    ledger = LedgerThread(settings.ledger_path)
    log.info("ledger at %s", settings.ledger_path)

    def register(server: grpc.aio.Server) -> None:
        billing_pb2_grpc.add_BillingServicer_to_server(BillingServicer(ledger), server)

    run(
        "billing",
        [billing_pb2.DESCRIPTOR.services_by_name["Billing"].full_name],
        register,
        server_settings,
        on_shutdown=ledger.close,
    )


if __name__ == "__main__":
    with exit_on_config_error("billing"):
        main()
