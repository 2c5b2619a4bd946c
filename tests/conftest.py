"""Shared fixtures.

``stack`` (session scope) is the whole Turnpike stack as local processes, started the
first time a test asks for it, as ``StackConfig.private`` lays it out: free ports (never
``make run``'s defaults), a temporary state folder, none of the shell's TURNPIKE_*
settings, no trace export. It yields ``devstack.StackEndpoints``: ``base_url``, ``ws_url``,
``api_key`` (sk-turnpike-dev), ``api_keys`` ({"dev", "alice", "bob"} -> key), every
service's address, ``log_dir``, ``max_body_bytes`` / ``max_frame_bytes`` (1 MiB). Tests that use it are marked ``stack`` automatically,
so ``pytest -m "not stack"`` runs everything else.

Each test is also marked by its folder: ``unit`` (tests/unit/<package>: in-process, no
stack), ``stack`` (tests/stack: the stack or processes of their own), ``containers``
(tests/containers), so ``pytest -m unit`` is the same as ``pytest tests/unit``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.billing_standin import recording_outbox
from support.gateway_standins import StandIns, resources
from support.local_stack import start_private_stack
from support.procs import free_port, start_service

from turnpike.devstack import LocalStack, StackConfig, StackEndpoints, StackError
from turnpike.gateway.engine.response_engine import ResponseEngine

TESTS_DIR = Path(__file__).resolve().parent
# The folders of tests/ whose tests get a marker of the same name.
FOLDER_MARKERS = ("unit", "stack", "containers")

STACK_ENV = {
    # Three tenants, to check that one cannot see another's responses.
    "TURNPIKE_API_KEYS": "sk-turnpike-dev:dev,sk-test-alice:alice,sk-test-bob:bob",
    # Small limits so size tests need only 1 MiB payloads.
    "TURNPIKE_MAX_BODY_BYTES": "1048576",
    "TURNPIKE_MAX_FRAME_BYTES": "1048576",
}


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The running ``LocalStack`` itself (its logs, its processes)."""
    try:
        local = start_private_stack(
            lambda: StackConfig.private(tmp_path_factory.mktemp("stack"), extra_env=STACK_ENV)
        )
    except StackError as exc:
        # Cached by pytest: every test needing the stack reports this, none retries.
        pytest.fail(f"the local stack did not start: {exc}", pytrace=False)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def stack(local_stack: LocalStack) -> StackEndpoints:
    return local_stack.endpoints


@pytest.fixture(autouse=True)
def _stack_still_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A service that died makes every later stack test fail confusingly; name it, with
    its log, at the test during which it died (or the next one)."""
    if "stack" not in request.fixturenames:
        yield
        return
    local: LocalStack = request.getfixturevalue("local_stack")
    _fail_if_exited(local, "before this test")
    yield
    _fail_if_exited(local, "during this test")


def _fail_if_exited(local: LocalStack, when: str) -> None:
    if gone := local.exited():
        pytest.fail("\n\n".join(proc.describe(when) for proc in gone), pytrace=False)


def folder_marker(path: Path) -> str | None:
    """The marker of the tests/ folder ``path`` lies in, if that folder has one."""
    try:
        folder = path.resolve().relative_to(TESTS_DIR).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in FOLDER_MARKERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names: set[str] = set()
        if folder := folder_marker(item.path):
            names.add(folder)
        if "stack" in getattr(item, "fixturenames", ()):
            names.add("stack")  # a stack test outside tests/stack (tests/containers has some)
        for name in sorted(names):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture
def start_worker() -> Iterator[Callable[..., tuple[subprocess.Popen, str]]]:
    """Start worker processes on free ports, killed at the end of the test: ``start(**env)``
    gives (process, address). The simulator only, unless a test configures a backend."""
    procs: list[subprocess.Popen] = []

    def start(**env: str) -> tuple[subprocess.Popen, str]:
        port = free_port()
        env = {
            "TURNPIKE_WORKER_PORT": str(port),
            "TURNPIKE_WORKER_ID": "worker-proc",
            "TURNPIKE_SHUTDOWN_GRACE_S": "5",
            **env,
        }
        procs.append(start_service("worker", env))
        return procs[-1], f"127.0.0.1:{port}"

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def backends() -> StandIns:
    """The gateway's backend clients over in-process stand-ins (router, safety, tokenizer)."""
    return StandIns()


@pytest.fixture
def engine(backends: StandIns) -> ResponseEngine:
    """A response engine over ``backends``, an in-memory store and fresh caches."""
    return ResponseEngine(resources(backends), outbox=recording_outbox())
