"""Billing: a durable, idempotent usage ledger behind gRPC."""
