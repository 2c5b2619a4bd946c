"""`make images`: every image the container stack needs, on a machine with or without a
registry.

1. Third-party images named in .env. One that is here is used as it is; one that is
   missing is pulled; one that cannot be pulled is built here as a stand-in under the
   same name, from Debian bookworm packages (debootstrap, then ``docker import``):
   ``PYTHON_IMAGE`` (minbase + Debian's python3, 3.11), ``REDIS_IMAGE`` (minbase +
   ``redis-server``), ``PROMETHEUS_IMAGE`` (minbase + ``prometheus``, promtool included),
   ``HAPROXY_IMAGE`` (minbase + ``haproxy``: the gateway replicas' load balancer) and
   ``CHROMIUM_IMAGE`` (chromium and chromium-driver: the dashboard's browser test,
   not part of the stack). ``JAEGER_IMAGE`` cannot be built that way; without it the
   stack runs without Jaeger (``make up`` says so). The stand-ins are independent, so
   up to STANDIN_JOBS are built at a time.
2. The wheels of every pinned package the services need (deploy/requirements/), for
   Linux x86-64 and CPython 3.11, downloaded into deploy/.build/wheels when the pins
   change.
3. One image per service from deploy/docker/Dockerfile (``docker build``; unchanged
   layers come from the build cache, so a rebuild after a code change takes seconds).
   The layers every service shares are built first, once; then up to SERVICE_JOBS
   services at a time, each finding the shared layers in the cache. They need only the
   Python base and the wheels, so they start while the other stand-ins are built.

Progress goes to stdout, one line per event, prefixed by its image; each build's full
output to deploy/.build/logs/.
Building a stand-in base needs root (debootstrap); it is installed with apt-get when
missing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from compose import image_exists, read_env

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / ".build"
REQUIREMENTS = REPO / "deploy" / "requirements"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
# The slowest builds first, so that none of them is left to finish alone.
SERVICES = ("gateway", "safety", "worker", "tokenizer", "imageres", "billing", "router")

DEBIAN_SUITE = "bookworm"
PULL_TIMEOUT_S = 60
# Wheels for the images, whatever machine builds them: glibc 2.36 (bookworm) x86-64.
WHEEL_PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]
# What `docker build` must never see from the caller's environment: BuildKit needs the
# buildx plugin, which a plain engine install may lack; the classic builder is enough.
BUILD_ENV = {"DOCKER_BUILDKIT": "0"}
# Builds at a time, of each kind. Each build waits now and then (the network, the disk, the
# Docker daemon), so three at a time keep even two cores busy; more would only queue.
STANDIN_JOBS = 3
SERVICE_JOBS = 3
# Root file systems go to a tmpfs only with this much memory available (bytes): three at a
# time, the Chromium one among them, take up to about 2 GB.
SCRATCH_MIN_MEMORY = 4 << 30

_say_lock = threading.Lock()


def say(message: str) -> None:
    with _say_lock:  # whole lines, whichever build thread speaks
        sys.stdout.write(f"[images] {message}\n")
        sys.stdout.flush()


@contextmanager
def started(
    jobs: Iterable[tuple[str, Callable[[], object]]], workers: int
) -> Iterator[dict[str, Future]]:
    """Start the named jobs, ``workers`` at a time, in the given order; their futures by
    name while they run. Leaving waits for them all; the first failure cancels the jobs
    not yet started and is raised once the running ones have ended."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(job) for name, job in jobs}
        try:
            yield futures
            for future in as_completed(futures.values()):
                future.result()
        except BaseException:
            for future in futures.values():
                future.cancel()
            raise


# -- configuration -------------------------------------------------------------------------


def service_image(env: dict[str, str], service: str) -> str:
    return f"{env['IMAGE_NAME']}/{service}:{env['IMAGE_VERSION']}"


# -- docker ----------------------------------------------------------------------------------


def docker(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], **kwargs)


def image_size_mb(name: str) -> float:
    out = docker("image", "inspect", "--format", "{{.Size}}", name, capture_output=True, text=True)
    return int(out.stdout.strip() or 0) / 1e6


def try_pull(name: str) -> bool:
    say(f"{name}: not here; pulling")
    try:
        pulled = docker(
            "pull", "--quiet", name, capture_output=True, text=True, timeout=PULL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        say(f"{name}: no answer from the registry within {PULL_TIMEOUT_S} s")
        return False
    if pulled.returncode == 0:
        return True
    reason = (pulled.stderr.strip().splitlines() or ["unknown error"])[-1]
    say(f"{name}: cannot be pulled ({reason})")
    return False


# -- stand-ins from Debian packages ---------------------------------------------------------


@dataclass(frozen=True)
class StandIn:
    kind: str
    packages: tuple[str, ...]
    changes: tuple[str, ...]  # `docker import --change` instructions
    # Empty folders the image's USER owns (an import can RUN nothing to make them).
    owned_dirs: tuple[str, ...] = ()


# Built in this order, the slowest first.
STANDINS = {
    # A test tool, not part of the stack: headless Chromium driven over WebDriver by the
    # dashboard's browser test (chromedriver on 9515, reachable from outside the container).
    "chromium": StandIn(
        "chromium",
        # dbus-x11: the session bus dconf-service needs, which debootstrap cannot choose itself.
        ("chromium", "chromium-driver", "fonts-dejavu-core", "dbus-x11"),
        (
            "ENV LANG=C.UTF-8",
            "ENV HOME=/tmp",
            "USER nobody",
            "WORKDIR /tmp",
            "EXPOSE 9515",
            'CMD ["chromedriver", "--port=9515", "--allowed-ips=", "--allowed-origins=*"]',
        ),
    ),
    "python": StandIn(
        "python",
        ("python3",),
        (
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            'CMD ["python3"]',
        ),
    ),
    "redis": StandIn(
        "redis",
        ("redis-server",),
        (
            "ENV LANG=C.UTF-8",
            "USER redis",
            "WORKDIR /data",
            "EXPOSE 6379",
            'CMD ["redis-server", "--protected-mode", "no"]',
        ),
        # Upstream's data folder, so a volume mounted there is Redis's to write in both.
        owned_dirs=("data",),
    ),
    # Upstream's entry point and flags, with Debian's paths (its package's user owns them).
    "prometheus": StandIn(
        "prometheus",
        ("prometheus",),
        (
            "ENV LANG=C.UTF-8",
            "USER prometheus",
            "WORKDIR /var/lib/prometheus",
            "EXPOSE 9090",
            'ENTRYPOINT ["/bin/prometheus"]',
            'CMD ["--config.file=/etc/prometheus/prometheus.yml", '
            '"--storage.tsdb.path=/var/lib/prometheus/metrics2", '
            '"--web.listen-address=0.0.0.0:9090"]',
        ),
    ),
    # Upstream's user and configuration path (`docker import` cannot set its STOPSIGNAL;
    # compose.yaml sets the stop signal).
    "haproxy": StandIn(
        "haproxy",
        ("haproxy",),
        (
            "ENV LANG=C.UTF-8",
            "USER haproxy",
            "WORKDIR /var/lib/haproxy",
            'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
        ),
    ),
}

# Removed from a stand-in's root filesystem, as Debian's own slim images do.
PRUNE = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/cache/debconf",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "tmp",
)
# Keeps later package installs as small (same paths as Debian's slim images exclude).
DPKG_SLIM = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
"""


def ensure_debootstrap() -> None:
    if os.geteuid() != 0:
        raise SystemExit(
            "[images] building a stand-in image needs root (debootstrap). Run `sudo make "
            "images`, or provide the image named in .env (docker pull / docker load)."
        )
    if shutil.which("debootstrap"):
        return
    say("installing debootstrap (apt-get)")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"],
        check=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )


def prune(rootfs: Path) -> None:
    for relative in PRUNE:
        folder = rootfs / relative
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    for relative in ("var/lib/apt/lists/partial", "var/cache/apt/archives/partial"):
        (rootfs / relative).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    # Docker provides these at run time; the build machine's must not be baked in.
    for relative in ("etc/resolv.conf", "etc/hostname", "etc/hosts"):
        path = rootfs / relative
        if path.exists() or path.is_symlink():
            path.unlink()
        path.write_text("")
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(DPKG_SLIM)


def unmount_inside(folder: Path) -> None:
    """Unmount what is mounted below folder, deepest first (a failed debootstrap may leave
    /proc and /sys mounted in its root file system)."""
    mounts = Path("/proc/mounts").read_text().splitlines() if Path("/proc/mounts").exists() else []
    inside = [m.split()[1] for m in mounts if m.split()[1].startswith(f"{folder}/")]
    for mountpoint in sorted(inside, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mountpoint], check=True)


def remove_rootfs(rootfs: Path) -> None:
    """Delete a root file system, never through a mount."""
    unmount_inside(rootfs)
    if rootfs.exists():
        shutil.rmtree(rootfs)


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def scratch(folder: Path) -> Iterator[None]:
    """``folder`` in memory (a tmpfs) while the stand-ins are built, when there is room and
    mounting works; else on the disk. dpkg syncs every file it unpacks, which costs
    debootstrap nearly a third of its time on a disk, and the trees are deleted once
    imported anyway."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = (
        available_memory() >= SCRATCH_MIN_MEMORY
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    say(f"stand-ins: root file systems {'in memory (tmpfs)' if mounted else 'on the disk'}")
    try:
        yield
    finally:
        if mounted:
            unmount_inside(folder)
            subprocess.run(["umount", "--lazy", str(folder)], check=True)


def own_cache(kind: str) -> Path:
    """A package cache for one debootstrap, seeded with hard links to the shared one
    (deploy/.build/debs). Concurrent runs cannot share a cache folder: debootstrap
    downloads straight to the final file name, where another run may be reading it."""
    shared = BUILD / "debs"
    own = shared / kind
    if own.exists():
        shutil.rmtree(own)
    own.mkdir(parents=True)
    for deb in shared.glob("*.deb"):
        os.link(deb, own / deb.name)
    return own


def share_downloads(own: Path) -> None:
    """Move what a successful debootstrap downloaded (or downloaded again, its checksum
    having failed) from its own cache into the shared one, then delete its own."""
    for deb in own.glob("*.deb"):
        shared = own.parent / deb.name
        if not (shared.exists() and shared.samefile(deb)):
            os.replace(deb, shared)
    shutil.rmtree(own)


def make_owned_dirs(standin: StandIn, rootfs: Path) -> None:
    """Create ``standin.owned_dirs``, owned by the user its USER change names."""
    if not standin.owned_dirs:
        return
    user = next(c.split()[1] for c in standin.changes if c.startswith("USER "))
    entry = next(
        line.split(":")
        for line in (rootfs / "etc/passwd").read_text().splitlines()
        if line.split(":")[0] == user
    )
    for relative in standin.owned_dirs:
        folder = rootfs / relative
        folder.mkdir(exist_ok=True)
        folder.chmod(0o755)
        os.chown(folder, int(entry[2]), int(entry[3]))


def build_standin(standin: StandIn, image: str) -> None:
    rootfs = BUILD / "rootfs" / standin.kind
    remove_rootfs(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    debs = own_cache(standin.kind)
    say(
        f"{image}: building a stand-in from Debian {DEBIAN_SUITE} packages: minbase + "
        f"{', '.join(standin.packages)} (debootstrap: a minute, a few for a large one)"
    )
    begin = time.monotonic()
    command = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(standin.packages)}",
        f"--cache-dir={debs}",
        DEBIAN_SUITE,
        str(rootfs),
    ]
    if mirror := os.environ.get("DEBOOTSTRAP_MIRROR"):
        command.append(mirror)
    log = BUILD / "logs" / f"debootstrap-{standin.kind}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        shutil.rmtree(debs)  # what it downloaded may be cut short
        raise SystemExit(f"[images] debootstrap of {image} failed; see {log}:\n{tail(log)}")
    share_downloads(debs)
    prune(rootfs)
    make_owned_dirs(standin, rootfs)
    description = (
        f"Stand-in for {image}, built locally from Debian {DEBIAN_SUITE} packages "
        f"(debootstrap minbase + {' '.join(standin.packages)})"
    )
    changes = [
        *standin.changes,
        f'LABEL org.opencontainers.image.description="{description}"',
        f"LABEL org.turnpike.stand-in={standin.kind}",
    ]
    # GNU tar streams the tree several times faster than Python's tarfile.
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", "-", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None
    imported = subprocess.run(
        ["docker", "import", *(arg for c in changes for arg in ("--change", c)), "-", image],
        stdin=tar.stdout,
        stdout=subprocess.DEVNULL,
    )
    tar.stdout.close()
    if tar.wait() != 0 or imported.returncode != 0:
        raise SystemExit(f"[images] docker import of {image} failed")
    remove_rootfs(rootfs)
    say(
        f"{image}: stand-in built in {time.monotonic() - begin:.0f} s "
        f"({image_size_mb(image):.0f} MB)"
    )


@contextmanager
def standins_built(wanted: dict[str, StandIn]) -> Iterator[dict[str, Future]]:
    """Build the stand-ins in the background, up to STANDIN_JOBS at a time, the slowest
    first, each in its own root file system with its own package cache; their futures by
    image meanwhile. Leaving waits for them all."""
    if not wanted:
        yield {}
        return
    ensure_debootstrap()
    order = list(STANDINS)
    ordered = sorted(wanted.items(), key=lambda item: order.index(item[1].kind))
    jobs = [(image, partial(build_standin, standin, image)) for image, standin in ordered]
    with scratch(BUILD / "rootfs"), started(jobs, STANDIN_JOBS) as futures:
        yield futures


def check_third_party(env: dict[str, str]) -> tuple[dict[str, str], dict[str, StandIn]]:
    """Each third-party image's state (present, pulled, stand-in built or missing), and the
    stand-ins to build."""
    states = {}
    wanted: dict[str, StandIn] = {}  # the stand-ins to build
    for key, kind in (
        ("PYTHON_IMAGE", "python"),
        ("REDIS_IMAGE", "redis"),
        ("PROMETHEUS_IMAGE", "prometheus"),
        ("HAPROXY_IMAGE", "haproxy"),
    ):
        image = env[key]
        if image_exists(image):
            states[image] = "present"
        elif try_pull(image):
            states[image] = "pulled"
        else:
            wanted[image] = STANDINS[kind]
            states[image] = "stand-in built"
    jaeger = env["JAEGER_IMAGE"]
    if image_exists(jaeger):
        states[jaeger] = "present"
    elif try_pull(jaeger):
        states[jaeger] = "pulled"
    else:
        states[jaeger] = "missing"
        say(
            f"{jaeger}: not available and cannot be built from Debian packages; the stack "
            "runs without Jaeger (its services still export OTLP to "
            "OTEL_EXPORTER_OTLP_ENDPOINT)"
        )
    # Turnpike's own test tool (the browser test): built once, never pulled.
    if not image_exists(chromium := env["CHROMIUM_IMAGE"]):
        wanted[chromium] = STANDINS["chromium"]
        states[chromium] = "stand-in built"
    return states, wanted


# -- wheels ------------------------------------------------------------------------------------


def requirement_files() -> list[Path]:
    return sorted(REQUIREMENTS.glob("*.txt"))


def ensure_wheels() -> Path:
    """Download every pinned wheel the images install, when the pins changed."""
    wheels = BUILD / "wheels"
    stamp = BUILD / "wheels.sha256"
    digest = hashlib.sha256()
    for path in requirement_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    if wheels.is_dir() and stamp.is_file() and stamp.read_text() == digest.hexdigest():
        say(f"wheels: up to date ({len(list(wheels.glob('*.whl')))} in {wheels.relative_to(REPO)})")
        return wheels
    if wheels.exists():
        shutil.rmtree(wheels)
    say("wheels: downloading the pinned packages for linux x86-64, CPython 3.11")
    begin = time.monotonic()
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311", "--dest", str(wheels),
    ]  # fmt: skip
    for platform in WHEEL_PLATFORMS:
        command += ["--platform", platform]
    for path in requirement_files():
        command += ["-r", str(path)]
    subprocess.run(command, check=True)
    stamp.write_text(digest.hexdigest())
    size = sum(p.stat().st_size for p in wheels.glob("*.whl")) / 1e6
    say(
        f"wheels: {len(list(wheels.glob('*.whl')))} ({size:.0f} MB) in "
        f"{time.monotonic() - begin:.0f} s"
    )
    return wheels


# -- service images ---------------------------------------------------------------------------


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def docker_build(env: dict[str, str], name: str, *args: str) -> float:
    """One ``docker build`` of the Dockerfile, the repository as its context, its output into
    deploy/.build/logs/<name>.log; the seconds it took. A failure ends the run with the
    log's last lines."""
    log = BUILD / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [
                "docker",
                "build",
                "--force-rm",
                "--file",
                str(DOCKERFILE),
                "--build-arg",
                f"PYTHON_IMAGE={env['PYTHON_IMAGE']}",
                *args,
                str(REPO),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **BUILD_ENV},
        )
    if done.returncode != 0:
        raise SystemExit(f"[images] building {name} failed; last lines of {log}:\n{tail(log)}")
    return time.monotonic() - begin


def build_service(env: dict[str, str], service: str, index: int, total: int) -> None:
    image = service_image(env, service)
    say(f"[{index}/{total}] {image}: building")
    elapsed = docker_build(env, service, "--build-arg", f"SERVICE={service}", "--tag", image)
    say(f"[{index}/{total}] {image}: built in {elapsed:.1f} s, {image_size_mb(image):.0f} MB")


def build_services(env: dict[str, str], services: list[str]) -> None:
    """The stages every service shares first, once (untagged: the cache of the service
    builds), so that concurrent service builds find the same layers instead of each
    building its own copy; then the services, up to SERVICE_JOBS at a time."""
    say(f"building {len(services)} service image(s) with deploy/docker/Dockerfile")
    say("shared stages (common, base): building")
    elapsed = docker_build(env, "base", "--target", "base")
    say(f"shared stages (common, base): built in {elapsed:.1f} s")
    total = len(services)
    jobs = [(s, partial(build_service, env, s, i, total)) for i, s in enumerate(services, 1)]
    with started(jobs, SERVICE_JOBS):
        pass  # leaving waits for every build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "services",
        nargs="*",
        help=f"service images to build (default: all of {', '.join(SERVICES)})",
    )
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.services) - set(SERVICES)):
        parser.error(f"unknown service(s): {', '.join(unknown)}")
    if docker("info", capture_output=True).returncode != 0:
        raise SystemExit("[images] no Docker engine answers (docker info failed)")
    begin = time.monotonic()
    env = read_env()
    states, wanted = check_third_party(env)
    # The service images need the Python base and the wheels only: they are built while
    # the other stand-ins still are.
    with standins_built(wanted) as standins:
        ensure_wheels()
        if python_base := standins.get(env["PYTHON_IMAGE"]):
            python_base.result()
        build_services(env, args.services or list(SERVICES))
    for image, state in states.items():
        say(f"{image}: {state}")
    say(f"done in {time.monotonic() - begin:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
