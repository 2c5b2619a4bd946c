"""The outputs: ``loop.json`` (every raw number, the summaries, the targets), ``loop.md``
(the tables, ``bench.loop.tables``) and the PNG plots (``bench.loop.plots``), all in one
folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.loop.plots import write_plots
from bench.loop.tables import markdown


def _round(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value


def columns(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A loop's per-turn records as columns (one list per field, nested dicts per key):
    the same numbers in a third of the bytes."""
    if not turns:
        return {}
    out: dict[str, Any] = {}
    for key, first in turns[0].items():
        if isinstance(first, dict):
            names = sorted({name for t in turns for name in t[key]})
            out[key] = {n: [_round(t[key].get(n)) for t in turns] for n in names}
        else:
            out[key] = [_round(t[key]) for t in turns]
    return out


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` for loop.json: every raw loop's turns stored as columns."""

    def loops(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**loop, "turns": columns(loop["turns"])} for loop in raw]

    out = {**data, "loops": loops(data["loops"])}
    if data.get("load"):
        many = data["load"]["concurrent_loops"]
        cells = [
            {
                **cell,
                "single": {**cell["single"], "raw": loops(cell["single"]["raw"])},
                "concurrent": {**cell["concurrent"], "raw": loops(cell["concurrent"]["raw"])},
            }
            for cell in many["cells"]
        ]
        out["load"] = {**data["load"], "concurrent_loops": {**many, "cells": cells}}
    return out


def write(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data["plots"] = write_plots(data, out_dir)
    (out_dir / "loop.json").write_text(json.dumps(compact(data), separators=(",", ":")) + "\n")
    (out_dir / "loop.md").write_text(markdown(data))
    return [out_dir / "loop.json", out_dir / "loop.md", *(out_dir / p for p in data["plots"])]
