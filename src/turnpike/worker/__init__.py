"""Worker: inference backends (the CPU simulator) behind the Inference gRPC service."""
