"""The model and tool of the two-tenant Gemini flow: a model name that puts Google's rules on a
loopback upstream, and one tool for its calls."""

from __future__ import annotations

MODEL = "gemini-3-flash-preview"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
