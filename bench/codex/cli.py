"""Runs the real Codex CLI (the ``openai-codex-cli-bin`` wheel) against a Turnpike base URL.

``codex_home`` writes a CODEX_HOME whose config.toml points a custom provider at the
stack and keeps Codex offline: no update check, analytics, feedback or OpenTelemetry
export, and the ``apps`` and ``plugins`` features (which reach ChatGPT services) off.
``run_codex`` runs ``codex exec`` in a working folder with a timeout. The Codex tests
(tests/support/codex.py re-exports this module) and ``python -m bench.codex`` share it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MODEL = "turnpike-sim"
PROVIDER = "turnpike"
ENV_KEY = "TURNPIKE_API_KEY"


def codex_binary() -> Path | None:
    """The wheel's ``codex`` executable, or None when the wheel is not installed."""
    spec = importlib.util.find_spec("codex_cli_bin")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "codex"
    return path if path.is_file() else None


@dataclass(frozen=True)
class CodexResult:
    exit_code: int
    stdout: str
    stderr: str


def _toml(value: str | bool) -> str:
    # JSON string escaping is valid TOML basic-string escaping.
    return ("true" if value else "false") if isinstance(value, bool) else json.dumps(value)


def codex_config(
    base_url: str,
    *,
    websockets: bool,
    model: str = MODEL,
    refused_tools_off: bool = False,
) -> str:
    """config.toml text for a Codex talking only to ``base_url``.

    ``refused_tools_off`` switches off the multi-agent tools (sent as a ``namespace``
    tool) and hosted ``web_search``, which Turnpike once refused; it serves both now
    (turnpike.gateway.protocol.tools), so Codex runs with its default tools unless a test asks otherwise.
    """
    lines = [
        f"model = {_toml(model)}",
        f"model_provider = {_toml(PROVIDER)}",
        "check_for_update_on_startup = false",
    ]
    if refused_tools_off:
        lines.append('web_search = "disabled"')
    lines += [
        "",
        f"[model_providers.{PROVIDER}]",
        'name = "Turnpike"',
        f"base_url = {_toml(base_url)}",
        'wire_api = "responses"',
        f"env_key = {_toml(ENV_KEY)}",
        f"supports_websockets = {_toml(websockets)}",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        "",
        "[features]",
        "apps = false",
        "plugins = false",
    ]
    if refused_tools_off:
        lines.append("multi_agent = false")
    return "\n".join(lines) + "\n"


# The bundled catalog entry a Turnpike model's metadata is copied from: a current
# Responses-API model (its tool kinds, truncation and reasoning settings).
TEMPLATE_MODEL = "gpt-5.5"


def model_catalog(
    home: Path, model: str, context_window: int, *, refused_tools_off: bool = True
) -> dict:
    """A Codex model catalog (``{"models": [ModelInfo]}``) holding ``model`` alone.

    Codex looks a model's metadata up in its own catalog: the bundled one, or the file
    ``model_catalog_json`` names. It asks ``{base_url}/models`` only when signed in to
    ChatGPT or when the provider's key comes from an ``auth`` command, never for an
    ``env_key`` provider; so the file is the way to name a Turnpike model. The entry is
    the bundled ``TEMPLATE_MODEL``'s (``codex debug models`` prints the catalog),
    renamed, with the model's context window; with ``refused_tools_off`` its
    ``apply_patch`` is not the freeform (custom) tool, as in the fallback metadata.
    """
    binary = codex_binary()
    if binary is None:
        raise RuntimeError("the openai-codex-cli-bin wheel is not installed")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    listed = subprocess.run(
        [str(binary), "debug", "models"],
        env={**env, "CODEX_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    bundled = {entry["slug"]: entry for entry in json.loads(listed.stdout)["models"]}
    entry = {
        **bundled[TEMPLATE_MODEL],
        "slug": model,
        "display_name": model,
        "description": "A model served by Turnpike.",
        "upgrade": None,
        "availability_nux": None,
        "context_window": context_window,
        "max_context_window": context_window,
    }
    if refused_tools_off:
        entry["apply_patch_tool_type"] = None  # 0.163 knows only "freeform"
    return {"models": [entry]}


def codex_home(
    folder: Path,
    base_url: str,
    *,
    context_window: int | None = None,
    **options: object,
) -> Path:
    """Write ``folder``/config.toml (see ``codex_config``) and return ``folder``. With
    ``context_window``, also a model catalog naming the model (``model_catalog``), which
    silences Codex's "Model metadata ... not found" warning."""
    folder.mkdir(parents=True, exist_ok=True)
    config = codex_config(base_url, **options)  # type: ignore[arg-type]
    if context_window is not None:
        model = str(options.get("model", MODEL))
        catalog = folder / "models.json"
        refused_off = bool(options.get("refused_tools_off", True))
        entry = model_catalog(folder, model, context_window, refused_tools_off=refused_off)
        catalog.write_text(json.dumps(entry))
        # A top-level key: it must come before the first [table] header.
        config = f"model_catalog_json = {_toml(str(catalog))}\n" + config
    (folder / "config.toml").write_text(config)
    return folder


def run_codex(
    home: Path,
    workdir: Path,
    prompt: str,
    *,
    api_key: str,
    timeout_s: float = 120.0,
    extra_args: tuple[str, ...] = (),
    extra_env: Mapping[str, str] | None = None,
) -> CodexResult:
    """``codex exec`` of ``prompt`` in ``workdir`` with CODEX_HOME=``home`` (and
    ``extra_env``: e.g. a ``RUST_LOG`` other than warn)."""
    binary = codex_binary()
    if binary is None:
        raise RuntimeError("the openai-codex-cli-bin wheel is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        ENV_KEY: api_key,
        "RUST_LOG": "warn",
        "NO_COLOR": "1",
        **(extra_env or {}),
    }
    argv = [
        str(binary),
        "exec",
        "--skip-git-repo-check",
        "--color",
        "never",
        "--cd",
        str(workdir),
        *extra_args,
        prompt,
    ]
    try:
        done = subprocess.run(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return CodexResult(-1, out, err + f"\n[codex exec timed out after {timeout_s} s]")
    return CodexResult(done.returncode, done.stdout, done.stderr)
