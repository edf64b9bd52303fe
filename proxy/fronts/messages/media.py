"""A Messages request's `image` and `document` blocks as chat content parts.

An image is an `image_url` part (its base64 data as a `data:` URL, or its URL). A document
becomes what its source is (Anthropic's document sources, each):

- `base64`, a PDF (Anthropic takes `application/pdf` only, and so does this): a chat `file`
  part, `{"type": "file", "file": {"filename": …, "file_data": "data:application/pdf;base64,…"}}`,
  OpenAI's chat file part, which OpenRouter takes for every model (read natively, or parsed to
  text for a model that reads no PDF) and other gateways take too. The filename is the block's
  `title`, else `document.pdf`.
- `url`, a PDF at a URL: the same part with the URL as `file_data`, as OpenRouter documents it
  (OpenAI's own chat API takes no URL there, and says so in its refusal). The proxy never
  fetches it.
- `text`, plain text: a text part with the text.
- `content`, a string or text and image blocks: text parts (and image parts).
- `file`, an id of Anthropic's Files API: refused, since it names a file on Anthropic's servers
  that no chat upstream can read.

A `title` or `context` goes first, as a text part of its own, so the model reads what the
block is. `citations` has no chat counterpart (the answer carries none): enabled, it is
ignored and counted `messages_field_ignored`. The block's `cache_control` goes on its last
part. Each PDF's place is kept (`Translated.documents`) to name it should the upstream refuse
`file` parts.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError, string_at
from proxy.fronts.messages.cache_marks import mark_of, marked
from proxy.fronts.messages.translated import Translated
from proxy.fronts.quoted import quoted

PDF = "application/pdf"
UNTITLED = "document.pdf"
"""The filename a PDF without a title goes up with (OpenAI's file part names every file)."""


def image_part(source: Any, where: str) -> dict[str, Any]:
    if isinstance(source, dict) and source.get("type") == "base64":
        media = string_at(source.get("media_type"), f"{where}.source.media_type")
        data = string_at(source.get("data"), f"{where}.source.data")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if isinstance(source, dict) and source.get("type") == "url":
        url = string_at(source.get("url"), f"{where}.source.url")
        return {"type": "image_url", "image_url": {"url": url}}
    raise MessagesError(f"{where}.source: an image's source must be base64 or url")


def document_parts(block: dict[str, Any], where: str, out: Translated) -> list[dict[str, Any]]:
    """The chat parts of one `document` block at `where`."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(source, dict) or kind not in _SOURCES:
        raise MessagesError(
            f"{where}.source: a document's source must be base64, url, text or content"
        )
    parts = _heading(block, where)
    if kind in ("base64", "url"):
        parts.append(_pdf(block, source, where))
        out.documents.append(where)
    elif kind == "text":
        parts.append(
            {"type": "text", "text": string_at(source.get("data"), f"{where}.source.data")}
        )
    elif kind == "content":
        parts += _content(source.get("content"), f"{where}.source.content")
    else:
        raise MessagesError(
            f"{where}.source: a Files API `file_id` names a file on Anthropic's servers, which "
            "a chat upstream cannot read; send the document itself (base64, url, text or content)"
        )
    citations = block.get("citations")
    if isinstance(citations, dict) and citations.get("enabled") is True:
        out.count("messages_field_ignored")
    if parts:
        marked(parts[-1], mark_of(block))
    return parts


_SOURCES = ("base64", "url", "text", "content", "file")


def _heading(block: dict[str, Any], where: str) -> list[dict[str, Any]]:
    said = []
    for name in ("title", "context"):
        value = block.get(name)
        if value is not None:
            said.append(string_at(value, f"{where}.{name}"))
    text = "\n".join(piece for piece in said if piece)
    return [{"type": "text", "text": text}] if text else []


def _pdf(block: dict[str, Any], source: dict[str, Any], where: str) -> dict[str, Any]:
    if source["type"] == "base64":
        media = source.get("media_type")
        if media != PDF:
            raise MessagesError(
                f"{where}.source.media_type: Input should be {quoted(PDF)} (got {quoted(media)})"
            )
        data = string_at(source.get("data"), f"{where}.source.data")
        file_data = f"data:{PDF};base64,{data}"
    else:
        file_data = string_at(source.get("url"), f"{where}.source.url")
    title = block.get("title")
    filename = title if isinstance(title, str) and title else UNTITLED
    return {"type": "file", "file": {"filename": filename, "file_data": file_data}}


def _content(content: Any, where: str) -> list[dict[str, Any]]:
    """A `content` source: a string, or text and image blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MessagesError(f"{where}: must be a string or a list of text and image blocks")
    parts = []
    for index, item in enumerate(content):
        here = f"{where}.{index}"
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": string_at(item.get("text"), f"{here}.text")})
        elif kind == "image":
            parts.append(image_part(item.get("source"), here))
        else:
            raise MessagesError(f"{here}: a document's content takes text and image blocks")
    return parts
