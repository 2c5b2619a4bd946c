"""Write what the settings declarations (src/turnpike/config.py and its
config_*.py neighbours) say into the files that cannot import them: the settings block
of .env (Compose), the settings of the Kubernetes ConfigMap and Secret
(deploy/k8s/base/config.yaml), and the reference, docs/settings.md.

Run through ``make settings`` after declaring, removing or changing a setting. In .env
and config.yaml only the settings block is rewritten (ports are ``make ports``'s, the
rest is edited by hand); docs/settings.md is written whole. ``tests/unit/turnpike/test_settings.py``
renders the files the same way and fails when the committed ones differ.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from turnpike.config_reference import Variable, variables

ROOT = Path(__file__).resolve().parent.parent
DOTENV = Path(".env")
K8S_CONFIG = Path("deploy/k8s/base/config.yaml")
DOCS = Path("docs/settings.md")

# .env's settings block: the variables Compose passes on, in groups, each with what an
# operator needs to know beside it. The values are the declarations'.
DOTENV_HEADER = (
    "Service settings, written by `make settings` from src/turnpike/config.py (each is\n"
    "described in docs/settings.md): change a default there, or set a value in the shell."
)
DOTENV_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("TURNPIKE_API_KEYS",)),
    (
        "Tenants with limits instead: the path of a tenants file, as the gateway sees it (docs/tenants-and-limits.md,\n"
        '"Tenants and keys"). deploy/tenants/ is mounted read-only at /etc/turnpike/tenants in the\n'
        "gateway: put the file there and set /etc/turnpike/tenants/<file>.yaml (example.yaml is an\n"
        "example). Set, it replaces TURNPIKE_API_KEYS, which must then be empty.",
        ("TURNPIKE_TENANTS_FILE",),
    ),
    (
        "Responses one gateway process has in flight at most before it sheds with 503 (0: off): an\n"
        "adaptive bound that follows the time to first token, under TURNPIKE_MAX_IN_FLIGHT.",
        (
            "TURNPIKE_MAX_IN_FLIGHT",
            "TURNPIKE_ADAPTIVE_ADMISSION",
            "TURNPIKE_ADAPTIVE_MIN_IN_FLIGHT",
            "TURNPIKE_ALLOW_PIPELINE_OVERRIDE",
        ),
    ),
    (
        'Bounds on input (docs/tenants-and-limits.md, "Bounds on input"): characters of text per create request, the\n'
        "seconds a client has to send a request's head (slowloris), the seconds a client may stop\n"
        "reading its stream before its connection is aborted, characters per render in the\n"
        "tokenizer, and the seconds a worker's stream may send nothing before its response fails.",
        ("TURNPIKE_MAX_INPUT_CHARS",),
    ),
    (
        "A conversation's bounds (stored, or a chain of responses): its items, and their bytes as\n"
        "stored (JSON); at most half of the gRPC message limit (64 MiB unless\n"
        "TURNPIKE_GRPC_MAX_MESSAGE_BYTES says otherwise).",
        (
            "TURNPIKE_MAX_CONVERSATION_ITEMS",
            "TURNPIKE_MAX_CONVERSATION_BYTES",
            "TURNPIKE_HEADER_TIMEOUT_S",
            "TURNPIKE_WRITE_STALL_TIMEOUT_S",
            "TURNPIKE_WORKER_SILENCE_TIMEOUT_S",
        ),
    ),
    (
        "Seconds the gateway waits for a call to safety, the tokenizer or the router.",
        ("TURNPIKE_BACKEND_TIMEOUT_S", "TURNPIKE_TOKENIZER_MAX_CHARS", "TURNPIKE_SHUTDOWN_GRACE_S"),
    ),
    (
        "Every service's logging level: DEBUG, INFO, WARNING or ERROR. No level logs a secret.",
        ("TURNPIKE_LOG_LEVEL",),
    ),
    (
        "The gateway's access log: one line per request and per WebSocket response.create, at INFO\n"
        '(docs/observability.md, "Metrics"). false turns the lines off; the request counts stay.',
        ("TURNPIKE_ACCESS_LOG",),
    ),
    (
        "Bounds on in-memory state, sized to the containers' memory limits (compose.yaml): responses\n"
        "kept for previous_response_id (about 12 KB each), and pixels per decoded image (4096 x 4096).",
        ("TURNPIKE_STORE_MAX_RESPONSES",),
    ),
    (
        "The WebSocket mode of /v1/responses. false: upgrades are answered 426 Upgrade Required, on\n"
        "which Codex (and other clients that fall back) use HTTP and SSE instead.",
        ("TURNPIKE_WEBSOCKET_MODE",),
    ),
    (
        "response.create requests one WebSocket connection may have waiting (behind a busy lane, or\n"
        "for one of its active slots), each holding its parsed request; one more is refused.",
        ("TURNPIKE_WS_MAX_QUEUED_RESPONSES",),
    ),
    (
        "The shared response store. Empty: in process. `make up PROFILES=redis` sets it to the\n"
        "stack's Redis (redis://redis:6379/0) unless it is set here or in the shell.",
        ("TURNPIKE_REDIS_URL",),
    ),
    (
        "Gateway processes in the gateway container (one core each). More than one needs the shared\n"
        "store (PROFILES=redis) and more memory: raise the gateway's mem_limit with it.",
        ("TURNPIKE_GATEWAY_PROCESSES",),
    ),
    (
        "The key that seals compaction items (base64 of 32 bytes: openssl rand -base64 32). Empty:\n"
        "the gateway makes one at start, and sealed items do not survive a restart or open on\n"
        "another replica. Set the same key on every replica.",
        ("TURNPIKE_SERVER_KEY", "TURNPIKE_IMAGERES_MAX_IMAGE_PIXELS"),
    ),
    (
        "Pixels all the input images of one request may hold together (four images of the size\n"
        "above), read from their headers and refused before any is decoded.",
        ("TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS",),
    ),
    (
        'A stopping gateway (docs/deployment.md, "Deploys that break nothing"): seconds it stays up\n'
        "not ready, so HAProxy's checks (every 2 s, down after 2) move new requests away first;\n"
        "then seconds its responses in flight get. The gateway's stop_grace_period covers both.",
        ("TURNPIKE_SHUTDOWN_DELAY_S", "TURNPIKE_GATEWAY_DRAIN_S"),
    ),
    (
        "Model backends beside the simulator (docs/architecture.md, worker), each off while empty. Set the\n"
        "secrets in the shell rather than here: a shell variable overrides its line.",
        (
            "CEREBRAS_API_KEY",
            "CEREBRAS_BASE_URL",
            "TURNPIKE_OPENAI_COMPAT_BASE_URL",
            "TURNPIKE_OPENAI_COMPAT_API_KEY",
            "TURNPIKE_OPENAI_COMPAT_MODEL",
            "TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON",
        ),
    ),
)
# Set in the Secret, not the ConfigMap; empty values are left out of both (unset).
K8S_SECRETS = ("TURNPIKE_API_KEYS",)


def _comment(text: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}" for line in text.splitlines()]


def dotenv_names() -> list[str]:
    return [name for _, names in DOTENV_GROUPS for name in names]


def dotenv_block(declared: Mapping[str, Variable]) -> str:
    lines = _comment(DOTENV_HEADER)
    for comment, names in DOTENV_GROUPS:
        lines += _comment(comment)
        lines += [f"{name}={declared[name].deployed}" for name in names]
    return "\n".join(lines) + "\n"


def _replace_block(text: str, start: str, end: str, block: str, where: Path) -> str:
    """``text`` with the lines from the one starting with ``start`` up to (not including)
    the first after it matching ``end`` replaced by ``block``; a file without them
    changed shape, so fail rather than write a second block."""
    match = re.search(rf"(?ms)^{re.escape(start)}.*?(?=^{end})", text)
    if match is None:
        raise SystemExit(
            f"gen_settings: no settings block in {where}: update scripts/gen_settings.py"
        )
    return text[: match.start()] + block + text[match.end() :]


def render_dotenv(text: str, declared: Mapping[str, Variable]) -> str:
    """The block runs from its header to the first blank line."""
    return _replace_block(text, "# Service settings", r"$", dotenv_block(declared), DOTENV)


def _yaml_scalar(value: str) -> str:
    """As config.yaml spells values: quoted where YAML would read something else."""
    return value if isinstance(yaml.safe_load(value), str) else f"'{value}'"


def render_config_map(text: str, declared: Mapping[str, Variable]) -> str:
    """The ConfigMap's settings (after the addresses, which are ``make ports``'s, and
    before the OpenTelemetry ones) and the Secret's keys: what .env gives a value."""
    values = {name: declared[name].deployed for name in dotenv_names() if declared[name].deployed}
    lines = _comment(
        "Written by `make settings` from src/turnpike/config.py: the values .env gives\n"
        "(docs/settings.md describes them; empty ones stay unset).",
        "  ",
    )
    lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in values.items() if k not in K8S_SECRETS]
    text = _replace_block(
        text, "  # Written by `make settings`", "  OTEL_", "\n".join(lines) + "\n", K8S_CONFIG
    )
    for name in K8S_SECRETS:
        text, count = re.subn(
            rf"(?m)^(  {name}: ).*$", lambda m, n=name: m.group(1) + _yaml_scalar(values[n]), text
        )
        if count != 1:
            raise SystemExit(f"gen_settings: no {name} in the Secret of {K8S_CONFIG}")
    return text


HEAD = "| variable | type | accepts | default | Compose | read by | what it does |"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: str) -> str:
    return f"`{value}`" if value else "empty"


def render_docs(declared: Mapping[str, Variable], in_dotenv: Sequence[str]) -> str:
    lines = [
        "# Settings",
        "",
        "Every environment variable the services read: its type, the values it accepts, its",
        "default, what it does, and which services read it. Written by `make settings` from the",
        "declarations in `src/turnpike/config.py` (and `config_gateway.py`, `config_shared.py`",
        "beside it), which are the one place a setting is defined; a test fails when this page,",
        "`.env` or `deploy/k8s/base/config.yaml` is stale.",
        "",
        "A value is trimmed, and an empty one means the default (but for text, which is taken",
        "as written). A value out of range stops the service at start with exit code 2 and one",
        "line: `<service>: configuration error: <VARIABLE>='<value>': <what is wrong>`. Ports",
        "are the catalogue's (`src/turnpike/catalogue.py`, written out by `make ports`).",
        "",
        "The Compose column is what `.env` sets, and the Kubernetes base alike (its ConfigMap, and",
        "the Secret for `TURNPIKE_API_KEYS`): shown where it differs from the default; a dash",
        "where Compose leaves the setting to the service or sets it per container.",
    ]
    section = ""
    for row in declared.values():
        if row.section != section:
            section = row.section
            lines += ["", f"## {section}", "", HEAD, "|---|---|---|---|---|---|---|"]
        if row.name not in in_dotenv:
            compose = "-"
        else:
            compose = "same" if row.deployed == row.default else _code(row.deployed)
        default = row.shown_default if row.default != row.shown_default else _code(row.default)
        cells = [
            f"`{row.name}`",
            row.kind + (" (secret)" if row.secret else ""),
            _cell(row.range) or "any",
            _cell(default),
            compose,
            ", ".join(row.readers),
            _cell(row.description),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(root: Path = ROOT, declared: Mapping[str, Variable] | None = None) -> dict[Path, str]:
    """Every file's text with the declarations, by path relative to ``root``."""
    declared = variables() if declared is None else declared
    unknown = sorted(set(dotenv_names()) - set(declared))
    if unknown:
        raise SystemExit(f"gen_settings: .env lists undeclared settings: {unknown}")
    return {
        DOTENV: render_dotenv((root / DOTENV).read_text(), declared),
        K8S_CONFIG: render_config_map((root / K8S_CONFIG).read_text(), declared),
        DOCS: render_docs(declared, dotenv_names()),
    }


def main() -> int:
    for path, text in render().items():
        target = ROOT / path
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
            print(f"gen_settings: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
