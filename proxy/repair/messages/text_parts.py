"""The text of a content given as a string or as an array of text parts."""

from __future__ import annotations

from typing import Any

# vLLM renders several text parts of one message joined by a newline (chat_utils), so the
# string a rule makes of them reads the way the upstream would have read the parts.
PART_SEPARATOR = "\n"


def text_of(content: Any) -> str | None:
    """The content as one string, or None when it holds anything but text (an image, a part
    nobody documented): such a content cannot become a string without losing something."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        return None
    texts = texts_of(content)
    return PART_SEPARATOR.join(texts) if texts is not None else None


def texts_of(parts: list[Any]) -> list[str] | None:
    """Each part's text, when every part is a text part; None when any is anything else."""
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "text":
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return texts
