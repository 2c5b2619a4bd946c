"""Turnpike's shared library: configuration, telemetry, gRPC bootstrap and the
generated API stubs (``turnpike.<service>.v1``, produced by ``make protos``)."""
