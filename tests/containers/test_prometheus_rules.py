"""deploy/prometheus checked by promtool, inside the Prometheus image of .env (the same
package as the server): the configuration, the rules, and the rules' unit tests
(tests.yml). The folder is mounted read-only where compose.yaml mounts it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "deploy" / "prometheus"
MOUNT = "/etc/prometheus"


def promtool(image: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "docker", "run", "--rm", "--network", "none", "--read-only",
            "--tmpfs", "/tmp", "--volume", f"{FOLDER}:{MOUNT}:ro", "--entrypoint", "promtool",
            image, *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("check", "config", f"{MOUNT}/prometheus.yml"),
        ("check", "rules", f"{MOUNT}/rules.yml"),
        ("test", "rules", f"{MOUNT}/tests.yml"),
    ],
    ids=["check-config", "check-rules", "test-rules"],
)
def test_promtool(images, args):
    done = promtool(images.settings["PROMETHEUS_IMAGE"], *args)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_has_a_unit_test():
    rules = yaml.safe_load((FOLDER / "rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert alerts >= {"TurnpikeApiOverheadHigh", "TurnpikeServiceDown"}
    tests = yaml.safe_load((FOLDER / "tests.yml").read_text())
    tested = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert alerts == tested, f"alerts without a firing test: {sorted(alerts - tested)}"


def test_the_image_runs_prometheus_as_a_user(images):
    image = images.settings["PROMETHEUS_IMAGE"]
    inspect = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    config = json.loads(inspect.stdout)
    assert config["User"] not in ("", "0", "root"), config["User"]
    assert config["Entrypoint"] == ["/bin/prometheus"], config["Entrypoint"]
