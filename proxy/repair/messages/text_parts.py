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
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return PART_SEPARATOR.join(texts)
