"""The cancel channel's connection dying of a timeout (a real redis-server). With Redis cut
off the network, the channel's idle connection is given up by its TCP keepalive (redis-py
sets 30 s idle, then 3 probes 5 s apart) and the socket fails with ETIMEDOUT: a
TimeoutError, which redis-py's pub/sub read takes for "no message yet". ``listen()``
looped on it without ever yielding: the gateway's event loop stalled and its memory grew
(the error's traceback, longer at each raise) until the container's limit killed it; HAProxy
then answered the clients 502 and 503 itself. Seen in the chaos test's Redis partition.

The failure is injected the way asyncio's transport meets it (a read that fails with
ETIMEDOUT), in a process of its own with a watchdog, so a stall ends the process rather
than the test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, errno, os, sys, threading, time
from redis import asyncio as aioredis
from turnpike.gateway.state import background_redis

URL = sys.argv[1]
made = []
real_from_url = aioredis.from_url


def capturing_from_url(*args, **kwargs):
    made.append(real_from_url(*args, **kwargs))
    return made[-1]


background_redis.aioredis.from_url = capturing_from_url
beat = [time.monotonic()]


def watchdog():
    while True:
        time.sleep(0.5)
        if time.monotonic() - beat[0] > 3:
            print("STALLED: the event loop ran nothing for 3 s", flush=True)
            os._exit(3)


async def heartbeat():
    while True:
        beat[0] = time.monotonic()
        await asyncio.sleep(0.05)


async def cancelled(background, got, tenant, response_id, within_s=10):
    deadline = time.monotonic() + within_s
    while (tenant, response_id) not in got:
        assert time.monotonic() < deadline, f"no cancel {response_id} within {within_s} s"
        await background.request_cancel(tenant, response_id)
        await asyncio.sleep(0.2)


async def main():
    asyncio.create_task(heartbeat())
    threading.Thread(target=watchdog, daemon=True).start()
    background = background_redis.SharedBackground(URL, 60, 16, prefix=f"test:{os.getpid()}")
    got = []

    async def on_cancel(tenant, response_id):
        got.append((tenant, response_id))

    background.listen(on_cancel)
    await cancelled(background, got, "acme", "before")
    [listener] = made[1:]
    [connection] = listener.connection_pool._get_in_use_connections()
    # What the transport does when recv() fails with ETIMEDOUT.
    connection._writer.transport._fatal_error(
        TimeoutError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT))
    )
    await asyncio.sleep(2)  # the loop keeps running (the watchdog would have ended us)
    await cancelled(background, got, "acme", "after")
    await background.close()
    print("RECOVERED", flush=True)


asyncio.run(main())
"""


def test_the_cancel_channel_survives_its_connection_timing_out(redis_url):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, redis_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "RECOVERED" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-3000:]
    )
