"""A Responses message's content and a call's output as chat content: text parts
(`input_text`, `output_text`, `refusal`) and images (`input_image`) become chat's parts, one
text stays a plain string (what every chat upstream takes)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.fronts.responses.openai_errors import invalid


def chat_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A Responses content -> chat content: one text stays a string, images become parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise invalid(f"{where}.content", f"content parts of type {kind!r} are not supported")
    if all(part["type"] == "text" for part in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def joined_text(parts: list[dict[str, Any]]) -> str:
    """The text of chat parts, images left out (an assistant message's content is text)."""
    return "".join(str(part.get("text") or "") for part in parts if part.get("type") == "text")


def output_text(output: Any) -> str:
    """A call's output (a string, or `input_text` parts) as a tool message's text."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(
            str(part.get("text") or "")
            for part in output
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
        )
    return "" if output is None else json_text(output)


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()
