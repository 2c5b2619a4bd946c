"""``python -m turnpike.imageres``: the image resolution service (and legacy worker proxy)."""

from __future__ import annotations

import grpc

from turnpike.config import GrpcServerSettings, ImageresSettings, exit_on_config_error
from turnpike.grpc_server import run
from turnpike.image_resolution import Limits
from turnpike.imageres.proxy import WorkerChannels
from turnpike.imageres.server import ImageResolverServicer
from turnpike.imageres.v1 import imageres_pb2, imageres_pb2_grpc


def main() -> None:
    server_settings = GrpcServerSettings.for_service("imageres")
    settings = ImageresSettings()
    limits = Limits(
        max_image_bytes=settings.max_image_bytes,
        max_image_pixels=settings.max_image_pixels,
        max_request_pixels=settings.max_request_pixels,
    )
    channels = WorkerChannels()

    def register(server: grpc.aio.Server) -> None:
        imageres_pb2_grpc.add_ImageResolverServicer_to_server(
            ImageResolverServicer(limits, channels), server
        )

    run(
        "imageres",
        [imageres_pb2.DESCRIPTOR.services_by_name["ImageResolver"].full_name],
        register,
        server_settings,
        on_shutdown=channels.close,
    )


if __name__ == "__main__":
    with exit_on_config_error("imageres"):
        main()
