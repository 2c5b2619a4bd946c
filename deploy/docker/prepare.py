"""The build-time step of the image's ``deps`` stage (deploy/docker/Dockerfile).

1. Code: copy what the service runs from the build's ``services/`` tree into the app
   folder: the shared library and the service (services never import each other);
   then byte-compile it (the running service cannot write there).
2. Check: import the service's entry module once, so a package missing from its
   requirement list fails the build, not the service.
3. Data: unpack what the service's packages ship compressed, so the running service
   never writes or fetches it. Today: the o200k vocabulary of the harmony renderer.
"""

from __future__ import annotations

import compileall
import importlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

SOURCE_DIR = Path("/opt/turnpike/src")
APP_DIR = Path("/opt/turnpike/app")  # PYTHONPATH of the runtime image
VOCAB_DIR = Path("/opt/turnpike/vocab")  # TURNPIKE_VOCAB_DIR of the runtime image
SHARED = "turnpike"


def packages_of(service: str) -> list[str]:
    return [SHARED, service]


def copy_code(service: str) -> None:
    for package in packages_of(service):
        shutil.copytree(
            SOURCE_DIR / package,
            APP_DIR / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    if not compileall.compile_dir(APP_DIR, quiet=1):
        raise SystemExit("prepare: byte-compiling the code failed")
    print(f"prepare: code of {', '.join(packages_of(service))}")


# Modules a service imports only when it first needs them (its entry module does not).
LAZY_IMPORTS = {"gateway": ("gateway.pdf_worker", "pypdfium2")}


def check_imports(service: str) -> None:
    # The app folder did not exist when this interpreter started: forget that.
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    for module in (f"{service}.__main__", *LAZY_IMPORTS.get(service, ())):
        importlib.import_module(module)
    print(f"prepare: {service} imports with this image's packages")


def unpack_data() -> None:
    VOCAB_DIR.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("bpe_openai") is None:
        return
    from turnpike.vocab import ensure_vocab_dir

    print(f"prepare: o200k vocabulary unpacked into {ensure_vocab_dir(str(VOCAB_DIR))}")


def main() -> None:
    service = os.environ["TURNPIKE_SERVICE"]
    copy_code(service)
    check_imports(service)
    unpack_data()


if __name__ == "__main__":
    main()
