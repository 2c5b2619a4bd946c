"""Custom tools (free-form input, in a format) told to a model that knows only functions.

The tokenizer describes one in the rendered prompt, and the chat-completions backend
offers one as a function whose single ``input`` string is the free-form text: both say
what the input must be with ``describe``.
"""

from __future__ import annotations

import json

# The one parameter of the function a custom tool is offered as, on chat backends.
INPUT_PARAMETER = "input"


def describe(description: str, format_json: str) -> str:
    """The tool's description, then what its input must be (the grammar, if it has one)."""
    try:
        fmt = json.loads(format_json) if format_json.strip() else {}
    except json.JSONDecodeError:
        fmt = {}
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return f"{description}\n\nInput: free-form text.".lstrip()
    return (
        f"{description}\n\nInput: free-form text in this {fmt.get('syntax')} grammar:\n"
        f"{fmt.get('definition')}"
    ).lstrip()


def as_function_parameters(description: str, format_json: str) -> dict[str, object]:
    """The JSON Schema of the function a custom tool is offered as: one ``input`` string."""
    return {
        "type": "object",
        "properties": {
            INPUT_PARAMETER: {"type": "string", "description": describe("", format_json)}
        },
        "required": [INPUT_PARAMETER],
        "additionalProperties": False,
    }
