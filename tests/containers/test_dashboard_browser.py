"""The live dashboard in a real headless Chromium (Debian's, the CHROMIUM_IMAGE of `make
images`) against the local stack: it loads, its numbers move when traffic flows, and it
asks nothing of anyone but the gateway.

The browser runs in a container on the host's network (``--network host``), so it reaches
the stack on loopback; chromedriver listens on a free loopback port, driven by
``selenium.webdriver.Remote``. Traffic comes from the official ``openai`` SDK, in threads:
agent loops over HTTP (SSE) and over WebSocket, from three tenants.

``TURNPIKE_DASHBOARD_SCREENSHOT=docs/dashboard.png`` also saves a screenshot of the page
(1280x900) after a longer stretch of traffic (docs/observability.md, "Dashboard").
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support.procs import free_port
from support.scripts import load_script
from support.tools import WEATHER_TOOL, only_call, tool_result

REPO = Path(__file__).resolve().parents[2]
deploy_compose = load_script("turnpike_deploy_compose", REPO / "deploy" / "compose.py")

SCREENSHOT = os.environ.get("TURNPIKE_DASHBOARD_SCREENSHOT")
SCREENSHOT_TRAFFIC_S = float(os.environ.get("TURNPIKE_DASHBOARD_SCREENSHOT_S", "100"))
TILES = ("turns-per-s", "turns-total", "ttft-p50", "overhead-p50", "websockets", "active")
WAIT_S = 30.0


# -- the browser ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromedriver(docker_engine: None) -> Iterator[str]:
    """chromedriver in the Chromium image, on a free loopback port of the host: its URL."""
    from testcontainers.core.container import DockerContainer

    image = deploy_compose.read_env()["CHROMIUM_IMAGE"]
    if not deploy_compose.image_exists(image):
        pytest.fail(f"image missing: {image}; run `make images`", pytrace=False)
    port = free_port()
    # Without --allowed-ips chromedriver answers local connections only: on the host's
    # network, this machine's loopback.
    container = (
        DockerContainer(image)
        .with_command(["chromedriver", f"--port={port}"])
        .with_kwargs(network_mode="host", shm_size="256m")
    )
    container.start()
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT_S
        while not _driver_ready(url):
            if time.monotonic() > deadline:
                logs = b"".join(container.get_logs()).decode(errors="replace")
                pytest.fail(f"chromedriver did not answer on {url}:\n{logs[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        container.stop()


def _driver_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/status", timeout=2).json()["value"]["ready"] is True
    except (httpx.HTTPError, ValueError, KeyError):
        return False


@pytest.fixture
def browser(chromedriver: str) -> Iterator[webdriver.Remote]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--no-first-run",
        "--window-size=1280,900",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Remote(command_executor=chromedriver, options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        driver.set_script_timeout(WAIT_S)
        yield driver
    finally:
        driver.quit()


def wait_for(driver: webdriver.Remote, what: str, check: Callable[[], object], timeout_s=WAIT_S):
    try:
        # The page redraws its rows on every poll: an element found just before a redraw
        # is stale by the time it is read, so that check is simply tried again.
        return WebDriverWait(
            driver,
            timeout_s,
            poll_frequency=0.25,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(lambda _: check())
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{what}: not within {timeout_s:.0f} s; the page shows:\n{text}")


def text_of(driver: webdriver.Remote, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None  # "—": nothing to show yet


# -- traffic ----------------------------------------------------------------------------------


class Traffic:
    """Agent loops through the official SDK until stopped: over HTTP (streamed) and over
    WebSocket (chained follow-ups on one connection), one thread each, each tenant in
    turn. With ``wave``, the pace rises and falls (a livelier screenshot)."""

    def __init__(self, base_url: str, keys: dict[str, str], wave: bool = False) -> None:
        self.clients = [
            OpenAI(base_url=base_url, api_key=key, max_retries=0) for key in keys.values()
        ]
        self.wave = wave
        self.turns = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guarded, args=(loop,), daemon=True)
            for loop in (self._http_loop, self._websocket_loop)
        ]
        self._begin = time.monotonic()

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WAIT_S)
        for client in self.clients:
            client.close()

    def _pause(self) -> None:
        pause = 0.05
        if self.wave:
            pause += 0.25 * (1 + math.sin((time.monotonic() - self._begin) / 12))
        self._stop.wait(pause)

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as exc:
            self.errors.append(exc)

    def _http_loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            client = self.clients[n % len(self.clients)]
            with client.responses.stream(
                model="turnpike-sim", input=f"Weather in city {n}?", tools=[WEATHER_TOOL]
            ) as stream:
                first = stream.get_final_response()
            call = only_call(first)
            client.responses.create(
                model="turnpike-sim",
                previous_response_id=first.id,
                input=tool_result(call.call_id, "sunny", "And tomorrow?"),
                tools=[WEATHER_TOOL],
            )
            self.turns += 2
            n += 1
            self._pause()

    def _websocket_loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            client = self.clients[n % len(self.clients)]
            with client.responses.connect() as conn:
                previous = None
                for i in range(8):  # a conversation of eight turns, then a new one
                    if self._stop.is_set():
                        return
                    body: dict[str, Any] = {"input": f"Weather in town {i}?"}
                    if previous is not None:
                        call = only_call(previous)
                        body = {
                            "previous_response_id": previous.id,
                            "input": tool_result(call.call_id, f"rain {i}", f"And town {i}?"),
                        }
                    conn.response.create(model="turnpike-sim", tools=[WEATHER_TOOL], **body)
                    for event in conn:
                        if event.type in ("response.completed", "response.failed", "error"):
                            break
                    assert event.type == "response.completed", event
                    previous = event.response
                    self.turns += 1
                    self._pause()
            n += 1


# -- the test ---------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_the_dashboard_in_a_real_browser(stack, browser: webdriver.Remote) -> None:
    origin = f"http://{stack.gateway}"
    browser.get(f"{origin}/dashboard")
    assert browser.title == "Turnpike dashboard"
    for tile in TILES:
        assert browser.find_element(By.ID, tile).is_displayed(), tile
    wait_for(browser, "the first poll", lambda: text_of(browser, "updated").startswith("updated"))
    wait_for(
        browser,
        "every backend healthy",
        lambda: (
            (rows := browser.find_elements(By.CSS_SELECTOR, "[data-backend] .dot"))
            and all("up" in (row.get_attribute("class") or "") for row in rows)
        ),
    )
    before = number(text_of(browser, "turns-total")) or 0

    with Traffic(stack.base_url, stack.api_keys, wave=bool(SCREENSHOT)) as traffic:
        wait_for(
            browser,
            "the turn counter moving",
            lambda: (number(text_of(browser, "turns-total")) or 0) > before,
        )
        wait_for(
            browser,
            "turns/s above zero",
            lambda: (number(text_of(browser, "turns-per-s")) or 0) > 0,
        )
        wait_for(browser, "a TTFT percentile", lambda: text_of(browser, "ttft-p50").endswith("ms"))
        wait_for(
            browser,
            "the turns/s line",
            lambda: browser.find_elements(By.CSS_SELECTOR, "#chart-turns path"),
        )
        wait_for(
            browser,
            "the stage bars",
            lambda: browser.find_elements(By.CSS_SELECTOR, "#stages rect"),
        )
        if SCREENSHOT:
            end = time.monotonic() + SCREENSHOT_TRAFFIC_S
            while time.monotonic() < end and not traffic.errors:
                time.sleep(1)
            save_screenshot(browser, Path(SCREENSHOT))
    assert not traffic.errors, traffic.errors
    assert traffic.turns > 0

    # No tenant's name on the page or in its data (three tenants sent traffic).
    for shown in (browser.page_source, httpx.get(f"{origin}/dashboard/data", timeout=10).text):
        assert not [t for t in stack.api_keys if re.search(rf"\b{re.escape(t)}\b", shown)]
    # Every request the page made went to the gateway (or stayed in the browser).
    urls = requests_made(browser)
    assert f"{origin}/dashboard/data" in urls
    outside = [u for u in urls if not u.startswith((f"{origin}/", "data:", "blob:"))]
    assert not outside, outside


def save_screenshot(driver: webdriver.Remote, path: Path) -> None:
    """The whole page, 1280 pixels wide."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
    driver.set_window_size(1280, height + chrome)
    time.sleep(2.5)  # one more poll, drawn at this size
    path = path if path.is_absolute() else REPO / path
    path.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path))


def requests_made(driver: webdriver.Remote) -> list[str]:
    """The URL of every request the page sent, from Chromium's performance log."""
    entries = driver.execute("getLog", {"type": "performance"})["value"]
    urls = []
    for entry in entries:
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
