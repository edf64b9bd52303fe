"""A Responses message's content and a call's output as chat content: text parts
(`input_text`, `output_text`, `refusal`) and images (`input_image`) become chat's parts, one
text stays a plain string (what every chat upstream takes)."""

from __future__ import annotations

from typing import Any

from proxy.fronts.quoted import quoted
from proxy.fronts.responses.openai_errors import invalid
from proxy.wire import json_codec


def chat_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A Responses content -> chat content: one text stays a string, images become parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        here = f"{where}.content[{index}]"
        if not isinstance(part, dict):
            raise invalid(here, "must be an object")
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": _text(part.get("text"), f"{here}.text")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": _text(part.get("refusal"), f"{here}.refusal")})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            if not isinstance(url, str):
                raise invalid(f"{here}.image_url", "an input_image needs its image_url or file_id")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise invalid(f"{here}.type", f"content parts of type {quoted(kind)} are not supported")
    if all(part["type"] == "text" for part in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def _text(text: Any, where: str) -> str:
    """A part's text: a string (absent or null is empty)."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise invalid(where, "must be a string")
    return text


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
    return json_codec.dumps(value).decode()
