"""What an upstream's error body says, whatever shape it comes in: the messages a refusal rule
reads (proxy/learning/refusal_rules.py), taken from the bounded text of the error
(refusal_reading.py), each one string.

The shapes, each as upstreams send it:

- OpenAI's (and vLLM's, Groq's, DeepSeek's JSON, Kimi's): `{"error": {"message": …, "type": …,
  "param": …, "code": …}}`; vLLM's older `{"object": "error", "message": …}`; LM Studio's
  `{"error": "…"}`.
- Google's: the same object in a JSON array, `{"error": {"code": 400, "message": …, "status":
  "INVALID_ARGUMENT", "details": [{"fieldViolations": [{"description": …}]}]}}`.
- OpenRouter's: `{"error": {"message": "Provider returned error", "metadata": {"raw": "…"}}}`,
  the provider's own body as a string in `raw` (read again, as a body of its own).
- serde's (DeepSeek, Kimi behind axum): plain text, `Failed to deserialize the JSON body into
  the target type: messages[0].role: unknown variant …`.
- pydantic's (FastAPI, Mistral): `{"detail": [{"type": …, "loc": ["body", "messages", 0,
  "role"], "msg": …}]}`, Mistral's inside `message`. Each item reads as
  `messages[0].role: <msg> (<type>)`, the loc spelled as the other shapes spell a place.
"""

from __future__ import annotations

from typing import Any

from proxy.wire import json_codec

_MAX_DEPTH = 4
"""Bodies inside bodies (OpenRouter's `raw`, a message that is JSON) read this deep at most."""


def error_messages(text: str) -> tuple[str, ...]:
    """Every message the error body `text` says, in the order it says them; a body that is not
    JSON is one message, its text."""
    out: list[str] = []
    _body(text, out, 0)
    return tuple(dict.fromkeys(message for message in out if message))


def _body(text: str, out: list[str], depth: int) -> None:
    stripped = text.strip()
    if depth < _MAX_DEPTH and stripped[:1] in ("{", "["):
        try:
            document = json_codec.loads(stripped)
        except json_codec.JSONDecodeError:
            pass
        else:
            _node(document, out, depth)
            return
    out.append(stripped)


def _node(node: Any, out: list[str], depth: int) -> None:
    if isinstance(node, list):
        for item in node:
            _node(item, out, depth)
        return
    if not isinstance(node, dict):
        return
    for key in ("error", "message", "detail"):
        value = node.get(key)
        if isinstance(value, str):
            _body(value, out, depth + 1)
        elif key == "detail" and isinstance(value, list):
            out.extend(_validation(item) for item in value if isinstance(item, dict))
        elif isinstance(value, (dict, list)):
            _node(value, out, depth)
    metadata = node.get("metadata")
    if isinstance(metadata, dict):
        raw = metadata.get("raw")
        if isinstance(raw, str):
            _body(raw, out, depth + 1)
        elif isinstance(raw, (dict, list)):
            _node(raw, out, depth + 1)
    for detail in node.get("details") or ():
        for violation in (detail.get("fieldViolations") or ()) if isinstance(detail, dict) else ():
            if isinstance(violation, dict) and isinstance(violation.get("description"), str):
                out.append(violation["description"])


def _validation(item: dict[str, Any]) -> str:
    """One pydantic error as `messages[0].role: Input should be … (literal_error)`."""
    place = ""
    for part in item.get("loc") or ():
        if isinstance(part, int):
            place += f"[{part}]"
        elif part != "body" or place:
            place += f".{part}" if place else str(part)
    said = f"{place}: {item.get('msg', '')}" if place else str(item.get("msg", ""))
    return f"{said} ({item['type']})" if isinstance(item.get("type"), str) else said
