"""A Responses message's content and a call's output as chat content: text parts
(`input_text`, `output_text`, `refusal`), images (`input_image`) and files (`input_file`)
become chat's parts, one text stays a plain string (what every chat upstream takes).

An `input_file` is chat's `file` part, as the Messages door sends a PDF (fronts/messages/
media.py): `file_data` as the client gave it (a `data:` URL or base64, which chat's `file_data`
takes alike), a `file_url` as the part's `file_data` (as OpenRouter reads a URL there; the
proxy never fetches it), a `file_id` as chat's `file_id` (a file on the upstream's own store,
where the client put it); the `filename` when the client named it. An upstream that refuses
`file` parts is learned (learning/refused_parts.py) and answered 400 naming the `input_file`.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.quoted import quoted
from proxy.fronts.responses.openai_errors import invalid
from proxy.wire import json_codec


def chat_content(
    content: Any, where: str, files: list[str] | None = None
) -> str | list[dict[str, Any]]:
    """A Responses content -> chat content: one text stays a string, images and files become
    parts (each file's place appended to `files`, to name it should the upstream refuse it)."""
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
        elif kind == "input_file":
            parts.append(file_part(part, here))
            if files is not None:
                files.append(here)
        else:
            raise invalid(f"{here}.type", f"content parts of type {quoted(kind)} are not supported")
    if all(part["type"] == "text" for part in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def file_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An `input_file` -> chat's `file` part (`file_data`, else `file_url`, else `file_id`)."""
    file: dict[str, Any] = {}
    filename = part.get("filename")
    if filename is not None:
        file["filename"] = _text(filename, f"{where}.filename")
    for name, chat_name in (
        ("file_data", "file_data"),
        ("file_url", "file_data"),
        ("file_id", "file_id"),
    ):
        value = part.get(name)
        if value is not None:
            file[chat_name] = _text(value, f"{where}.{name}")
            return {"type": "file", "file": file}
    raise invalid(where, "an input_file needs its file_data, file_url or file_id")


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
