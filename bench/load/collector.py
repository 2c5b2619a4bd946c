"""An OTLP/gRPC trace collector on loopback, as a process of its own: the load benchmark's
tracing variant exports every span to it, as a platform team's collector would receive
them, and its CPU is counted apart from the stack's and the generator's.

It decodes each export (the real protocol, as any collector must) and counts the spans by
service, keeping nothing else, so its memory stays flat however long the run.

``python -m bench.load.collector`` prints its port, then serves until its standard input
closes, and prints the counts as JSON on its last line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class SpanCounter(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: Counter[str] = Counter()
        self.exports = 0

    def Export(self, request, context):
        counted: Counter[str] = Counter()
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "?",
            )
            counted[service] += sum(len(s.spans) for s in resource_spans.scope_spans)
        with self._lock:
            self.spans.update(counted)
            self.exports += 1
        return trace_service_pb2.ExportTraceServiceResponse()

    def counts(self) -> dict[str, object]:
        with self._lock:
            return {"exports": self.exports, "spans": dict(self.spans)}


def serve() -> None:
    counter = SpanCounter()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(counter, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(1).wait()
    print(json.dumps(counter.counts()), flush=True)


class Collector:
    """The collector as a child process: ``port`` to export to, ``pid`` to meter,
    ``stop()`` for what it counted."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.load.collector"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())
        self.pid = self._process.pid

    def stop(self) -> dict[str, object]:
        out, _ = self._process.communicate(input="", timeout=30)
        lines = out.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}


if __name__ == "__main__":
    serve()
