"""The build-time step of the image's ``deps`` stage (deploy/docker/Dockerfile).

1. Code: copy what the service runs from the build's ``src/`` tree into the app
   folder: the shared library, the service, and the other services' wire stubs only
   (services never import each other's code);
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
PACKAGE = "turnpike"
# The service packages under turnpike/. An image holds its own service's code and, of the
# others, only their wire stubs (``turnpike.<service>.v1``), which any service may call.
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker", "devstack")


def ignore_other_services(service: str):
    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        relative = Path(folder).relative_to(SOURCE_DIR)
        if relative == Path(PACKAGE):
            skipped |= {"devstack"} - {service}
        elif len(relative.parts) == 2 and relative.parts[1] in set(SERVICES) - {service}:
            skipped |= {n for n in names if n not in ("__init__.py", "v1")}
        return skipped

    return ignore


def copy_code(service: str) -> None:
    shutil.copytree(SOURCE_DIR / PACKAGE, APP_DIR / PACKAGE, ignore=ignore_other_services(service))
    if not compileall.compile_dir(APP_DIR, quiet=1):
        raise SystemExit("prepare: byte-compiling the code failed")
    print(f"prepare: code of {PACKAGE} (shared library, wire stubs) and {PACKAGE}.{service}")


# Modules a service imports only when it first needs them (its entry module does not).
LAZY_IMPORTS = {"gateway": ("turnpike.gateway.upstream.pdf_worker", "pypdfium2")}


def check_imports(service: str) -> None:
    # The app folder did not exist when this interpreter started: forget that.
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    for module in (f"{PACKAGE}.{service}.__main__", *LAZY_IMPORTS.get(service, ())):
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
