"""``python -m bench.request_parse --out DIR``: what validating a create body costs
(``turnpike.gateway.protocol.request.parse_create``), in process, for the two bodies an
agent loop sends each turn:

- ``websocket turn``: a turn over WebSocket, after the first: the new items only (one
  ``function_call_output``) after ``previous_response_id``, with the instructions and the
  tools sent again, as Codex sends them.
- ``http stateless``: the same turn over HTTP without a stored response: the whole
  history (25 turns of reasoning, ``function_call`` and ``function_call_output`` items,
  messages between them) and the ~10 tools.

A ``bench-load`` run cannot resolve tens of microseconds out of milliseconds per turn;
this states the cost as CPU time per parse. Only ``parse_create`` is imported, so the
same file measures an older tree (``PYTHONPATH=<tree>/src``). Each run writes
``request-parse-<label>.json`` into ``--out`` (``--label``: ``before-1``, ``after-1``...);
``--summarize`` reads them all and writes ``request-parse.md`` and ``request-parse.png``
(runs labelled ``<variant>-<n>``: each variant's median of its runs' medians).

``--items`` (this tree only) answers why the items are validated by hand
(``turnpike.gateway.protocol.items``) and not by models: the stateless body's history
normalized by ``items.normalize_input``, against validated by the spec's generated union
(``CreateResponseBody.input``, untagged as the spec states it) and by a union of the
models told apart by ``type`` (what a switch would need at least, before normalizing);
writes ``items-as-models.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Annotated, Any, Union

from turnpike.gateway.protocol.request import parse_create

TURNS = 25
INSTRUCTIONS = (
    "You are a coding agent working in the user's repository. Read files before you "
    "change them, run the tests after a change, and keep your answers short. "
) * 20


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": sorted(properties),
            "additionalProperties": False,
        },
    }


TEXT = {"type": "string"}
TOOLS: list[dict[str, Any]] = [
    _function(
        "shell",
        "Run a command in the sandbox.",
        {
            "command": {"type": "array", "items": TEXT},
            "workdir": TEXT,
            "timeout_ms": {"type": "integer"},
        },
    ),
    _function(
        "read_file",
        "Read a file of the repository.",
        {"path": TEXT, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
    ),
    _function("list_dir", "List a directory.", {"path": TEXT, "depth": {"type": "integer"}}),
    _function(
        "grep_files",
        "Search files for a pattern.",
        {"pattern": TEXT, "path": TEXT, "include": TEXT},
    ),
    _function(
        "update_plan",
        "Record the plan's steps and their status.",
        {
            "explanation": TEXT,
            "plan": {
                "type": "array",
                "items": {"type": "object", "properties": {"step": TEXT, "status": TEXT}},
            },
        },
    ),
    _function("view_image", "Attach a local image to the conversation.", {"path": TEXT}),
    _function("web_fetch", "Fetch a URL as text.", {"url": TEXT}),
    _function("write_file", "Write a file.", {"path": TEXT, "content": TEXT}),
    _function("run_tests", "Run the test suite or one test.", {"target": TEXT}),
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files with a patch.",
        "format": {
            "type": "grammar",
            "syntax": "lark",
            "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
            'end_patch: "*** End Patch" LF?\nhunk: /[^\\n]+/ LF\n%import common.LF\n',
        },
    },
]
COMMON: dict[str, Any] = {
    "model": "turnpike-sim",
    "instructions": INSTRUCTIONS,
    "tools": TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-session-7c1e",
    "text": {"verbosity": "medium"},
    "client_metadata": {"x-codex-turn": "1"},
}


def _turn(n: int) -> list[dict[str, Any]]:
    """One turn of the loop: the model reasons, calls a tool, gets its output."""
    call_id = f"call_{n:04d}abcdefghijklmnop"
    items: list[dict[str, Any]] = [
        {
            "type": "reasoning",
            "id": f"rs_{n:04d}",
            "summary": [{"type": "summary_text", "text": f"Step {n}: look at the next file."}],
            "encrypted_content": "gAAAA" + "x" * 600,
        },
        {
            "type": "function_call",
            "id": f"fc_{n:04d}",
            "call_id": call_id,
            "name": "read_file",
            "arguments": json.dumps({"path": f"src/module_{n}.py", "offset": 0, "limit": 200}),
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": call_id,
            "output": "\n".join(f"{i:4d}  line {i} of module {n}" for i in range(40)),
        },
    ]
    if n % 5 == 4:  # now and then the model says where it is
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{n:04d}",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"Read {n + 1} files so far."}],
            }
        )
    return items


def bodies() -> dict[str, dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "Sandbox: workspace-write."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Find why the tests fail and fix it."}],
        },
    ]
    for n in range(TURNS):
        history += _turn(n)
    last = history[-1]
    return {
        "websocket turn": {**COMMON, "previous_response_id": "resp_0123456789", "input": [last]},
        "http stateless": {**COMMON, "input": history},
    }


def timed(body: dict[str, Any], calls: int, websocket: bool) -> float:
    """CPU µs per ``parse_create`` of ``body``."""
    started = time.process_time()
    for _ in range(calls):
        parse_create(body, default_model="turnpike-sim", websocket=websocket)
    return (time.process_time() - started) / calls * 1e6


def items_as_models(out: Path, calls: int, repeats: int) -> None:
    """The history's items: normalized by hand, against validated by models."""
    from pydantic import Discriminator, Tag, TypeAdapter

    from turnpike.gateway.protocol import openresponses as spec
    from turnpike.gateway.protocol.items import normalize_input

    def kind(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None
        found = value.get("type", "message" if "role" in value else None)
        return f"{found}:{value.get('role')}" if found == "message" else found

    roles = {
        "user": spec.UserMessageItemParam,
        "system": spec.SystemMessageItemParam,
        "developer": spec.DeveloperMessageItemParam,
        "assistant": spec.AssistantMessageItemParam,
    }
    members: list[Any] = [
        Annotated[spec.ReasoningItemParam, Tag("reasoning")],
        Annotated[spec.FunctionCallItemParam, Tag("function_call")],
        Annotated[spec.FunctionCallOutputItemParam, Tag("function_call_output")],
        Annotated[spec.CompactionSummaryItemParam, Tag("compaction")],
        *(Annotated[model, Tag(f"message:{role}")] for role, model in roles.items()),
    ]
    union: Any = Union[tuple(members)]  # noqa: UP007 - built from a list
    tagged_items: Any = list[Annotated[union, Discriminator(kind)]]
    spec_input: Any = spec.CreateResponseBody.model_fields["input"].annotation
    tagged: TypeAdapter[Any] = TypeAdapter(tagged_items)
    untagged: TypeAdapter[Any] = TypeAdapter(spec_input)
    history = [
        {"type": "message", **item} if "role" in item else item
        for item in bodies()["http stateless"]["input"]
    ]
    ways = {
        "items.normalize_input (validates and normalizes)": lambda: normalize_input(
            history, triggers=True
        ),
        "spec's union, as generated (validates only)": lambda: untagged.validate_python(
            history, strict=True
        ),
        "models told apart by type (validates only)": lambda: tagged.validate_python(
            history, strict=True
        ),
    }
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            started = time.process_time()
            for _ in range(calls):
                way()
            timings[name].append((time.process_time() - started) / calls * 1e6)
    report = {name: statistics.median(values) for name, values in timings.items()}
    (out / "items-as-models.json").write_text(
        json.dumps({"us": timings, "median_us": report}, indent=1)
    )
    lines = [
        "# The items: by hand or by models",
        "",
        f"The stateless body's history ({len(history)} items), CPU µs per call, the median of "
        f"{repeats} alternated timings of {calls} calls (`python -m bench.request_parse --items`).",
        "",
        "| way | median µs |",
        "| --- | ---: |",
        *(f"| {name} | {value:.0f} |" for name, value in report.items()),
    ]
    (out / "items-as-models.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summarize(out: Path) -> None:
    """``request-parse.md`` and ``.png`` from the runs in ``out``."""
    runs = [json.loads(path.read_text()) for path in sorted(out.glob("request-parse-*.json"))]
    variants: dict[str, list[dict[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: (not r["label"].startswith("before"), r["label"])):
        variants.setdefault(run["label"].rsplit("-", 1)[0], []).append(run)
    cases = list(runs[0]["median_us"])
    runs = [run for rs in variants.values() for run in rs]
    median = {
        variant: {case: statistics.median(r["median_us"][case] for r in rs) for case in cases}
        for variant, rs in variants.items()
    }
    best = {
        variant: {case: min(r["min_us"][case] for r in rs) for case in cases}
        for variant, rs in variants.items()
    }
    first = runs[0]
    lines = [
        "# What validating a create body costs",
        "",
        f"`python -m bench.request_parse`: CPU µs per `parse_create`, in process; each run "
        f"{first['repeats']} timings of {first['calls']:,} parses per body, the variants' "
        f"runs alternated on one machine ({len(runs)} runs). Median: of the runs' medians; "
        "best: the least disturbed timing of any run (the machine is shared).",
        "",
        "| body | items | bytes | "
        + " | ".join(f"{variant} median | {variant} best" for variant in variants)
        + " | each run's median |",
        "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in variants) + " | --- |",
    ]
    for case in cases:
        each = "; ".join(
            f"{r['label']} {r['median_us'][case]:.0f}" for rs in variants.values() for r in rs
        )
        lines.append(
            f"| {case} | {first['items'][case]} | {first['body_bytes'][case]:,} | "
            + " | ".join(
                f"{median[variant][case]:.1f} | {best[variant][case]:.1f}" for variant in variants
            )
            + f" | {each} |"
        )
    (out / "request-parse.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    _plot(out / "request-parse.png", median, best)


def _plot(
    path: Path, median: dict[str, dict[str, float]], best: dict[str, dict[str, float]]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(next(iter(median.values())))
    names = list(median)
    fig, axes = plt.subplots(1, len(cases), figsize=(4.5 * len(cases), 3.4))
    for ax, case in zip(axes, cases, strict=True):
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [median[n][case] for n in names], 0.4, label="median")
        ax.bar([x + 0.2 for x in xs], [best[n][case] for n in names], 0.4, label="best")
        ax.set_xticks(list(xs), names)
        ax.set_title(case)
        ax.set_ylabel("µs per parse_create")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarize", action="store_true", help="only write the summary")
    parser.add_argument("--items", action="store_true", help="the items by hand or by models")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.out)
        return
    if args.items:
        items_as_models(args.out, 50, args.repeats)
        return
    cases = bodies()
    for name, body in cases.items():  # warm up
        timed(body, 200, name.startswith("websocket"))
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # alternated between the bodies
        for name, body in cases.items():
            runs[name].append(timed(body, args.calls, name.startswith("websocket")))
    report = {
        "label": args.label,
        "calls": args.calls,
        "repeats": args.repeats,
        "items": {name: len(body["input"]) for name, body in cases.items()},
        "body_bytes": {name: len(json.dumps(body)) for name, body in cases.items()},
        "us_per_parse": runs,
        "median_us": {name: statistics.median(values) for name, values in runs.items()},
        # The least disturbed timing: on a shared machine, the closest to the code's cost.
        "min_us": {name: min(values) for name, values in runs.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"request-parse-{args.label}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["median_us"]))


if __name__ == "__main__":
    main()
