"""A small pool of PDF text workers (``turnpike.gateway.upstream.pdf_worker``), owned by one gateway process.

Reading a PDF is the one step of a request whose cost the gateway cannot bound from its
size: 2 KB of form XObjects can mean a million draws, 70 KB of deflate can mean 70 MB
of content. So it never runs on the event loop, nor in a thread of this process: each
PDF goes to a worker process whose address space and CPU seconds the kernel bounds,
and which is killed (then replaced) when its wall-clock deadline passes. A runaway
costs its own request, and never another's memory or the loop's time.

Bounded at every step: ``workers`` PDFs are read at once, at most ``queue`` more wait for
a worker (one more is refused at once, ``PdfPoolBusy``), and a worker is recycled after
``MAX_JOBS_PER_WORKER`` PDFs. Workers start on the first PDF, not with the gateway.

Asyncio subprocesses, not ``multiprocessing`` or a process-pool library: a worker is
killed and replaced on its own (a ``ProcessPoolExecutor`` breaks whole), each is a fresh
interpreter (no fork of the gateway's threaded process runs Python), and no thread
waits on a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import struct
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from turnpike.config import PdfSettings
from turnpike.gateway.upstream.pdf_worker import READY

log = logging.getLogger(__name__)

LENGTH = struct.Struct("!Q")
# PDFs one worker reads before it is replaced (what a long life leaks or fragments).
MAX_JOBS_PER_WORKER = 200
# A reply longer than this is not one the worker meant: JSON of the most characters
# allowed, at most 4 bytes each (6 for an escaped control character), and the keys.
REPLY_SLACK_BYTES = 1024
# How long a new worker may take to load before the host counts as overloaded (its
# start is not part of any PDF's deadline).
START_TIMEOUT_S = 30.0


class PdfPoolBusy(Exception):
    """Every worker is busy and the queue is full (or no worker can start): the gateway
    is overloaded."""


@dataclass
class PdfFailure(Exception):
    """Why a PDF gave no text. ``reason``: "unreadable", "encrypted", "pages" (over
    ``max_pages``: ``pages``), "chars" (over the characters asked for), or the bound a
    worker hit reading it: "deadline", "cpu", or "crashed" (the worker died: out of
    memory, most likely)."""

    reason: str
    pages: int = 0

    def __str__(self) -> str:
        return self.reason


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.jobs = 0

    async def ask(self, payload: bytes, max_chars: int) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(struct.pack("!QQ", max_chars, len(payload)) + payload)
        await stdin.drain()
        (size,) = LENGTH.unpack(await stdout.readexactly(LENGTH.size))
        if size > max_chars * 6 + REPLY_SLACK_BYTES:
            raise ValueError(f"a {size}-byte reply")
        reply = orjson.loads(await stdout.readexactly(size))
        text, error = reply.get("text"), reply.get("error")  # AttributeError: not an object
        if not isinstance(text, str) and not (
            isinstance(error, str) and isinstance(reply.get("pages", 0), int)
        ):
            raise ValueError("a reply without text or error")
        return reply


class PdfPool:
    def __init__(self, limits: PdfSettings | None = None) -> None:
        self.limits = limits or PdfSettings()
        self._slots = asyncio.Semaphore(self.limits.workers)
        self._waiting = 0
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._reaping: set[asyncio.Task[Any]] = set()

    @property
    def workers(self) -> int:
        """Worker processes alive now (idle or reading)."""
        return len(self._all)

    async def text(self, payload: bytes, max_chars: int | None = None) -> str:
        """The PDF's text, pages separated by a blank line; ``PdfFailure`` saying why
        there is none, ``PdfPoolBusy`` when the queue is full."""
        limit = self.limits.max_chars if max_chars is None else max_chars
        if self._slots.locked() and self._waiting >= self.limits.queue:
            raise PdfPoolBusy
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            return await self._text(payload, limit)
        finally:
            self._slots.release()

    async def _text(self, payload: bytes, max_chars: int) -> str:
        worker = await self._worker()
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                reply = await worker.ask(payload, max_chars)
        except TimeoutError:
            self._kill(worker)
            raise PdfFailure("deadline") from None
        except (OSError, EOFError, ValueError, AttributeError) as err:  # died, or spoke nonsense
            code = await self._exit_code(worker)
            log.warning("a PDF worker ended reading a PDF (%s, exit code %s)", err, code)
            raise PdfFailure("cpu" if code == -signal.SIGXCPU else "crashed") from None
        except BaseException:  # cancelled mid-PDF: what it is doing is of no use
            self._kill(worker)
            raise
        worker.jobs += 1
        if worker.jobs >= MAX_JOBS_PER_WORKER:
            self._retire(worker)
        else:
            self._idle.append(worker)
        if "error" in reply:
            raise PdfFailure(reply["error"], reply.get("pages", 0))
        text: str = reply["text"]
        if len(text) > max_chars:
            raise PdfFailure("chars")
        return text

    async def _worker(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.returncode is None:
                return worker
            self._all.discard(worker)  # ended while idle (killed from outside)
        limits = self.limits
        # Logs nothing and writes nothing to stderr: a PDF must not reach the log.
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "turnpike.gateway.upstream.pdf_worker",
                f"--memory-bytes={limits.memory_mb * 1024 * 1024}",
                f"--cpu-s={limits.cpu_s}",
                f"--max-pages={limits.max_pages}",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as err:  # out of processes or memory: the host is overloaded
            log.warning("starting a PDF worker failed: %s", err)
            raise PdfPoolBusy from None
        worker = _Worker(process)
        self._all.add(worker)
        assert process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                ready = await process.stdout.readexactly(len(READY))
        except (TimeoutError, EOFError, OSError):
            ready = b""
        except BaseException:
            self._kill(worker)
            raise
        if ready != READY:
            log.warning("a PDF worker did not start (exit code %s)", process.returncode)
            self._kill(worker)
            raise PdfPoolBusy
        return worker

    async def _exit_code(self, worker: _Worker) -> int:
        """How a worker that stopped answering ended (killed if it has not)."""
        self._all.discard(worker)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                return await worker.process.wait()
        self._kill(worker)
        return await worker.process.wait()

    def _kill(self, worker: _Worker) -> None:
        self._all.discard(worker)
        # os.kill, not Process.kill: that polls first, and a poll reaps a worker that
        # just died before asyncio's child watcher sees its exit code.
        if worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGKILL)
        self._reap(worker)

    def _retire(self, worker: _Worker) -> None:
        """Ask it to exit (end of its input) once it is idle."""
        self._all.discard(worker)
        if worker.process.stdin is not None:
            worker.process.stdin.close()
        self._reap(worker)

    def _reap(self, worker: _Worker) -> None:
        task = asyncio.get_running_loop().create_task(worker.process.wait())
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    async def close(self) -> None:
        for worker in list(self._all):
            self._kill(worker)
        self._idle.clear()
        if self._reaping:
            await asyncio.wait(list(self._reaping), timeout=5)
