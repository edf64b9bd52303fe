"""Streamed `content` as an array of typed blocks, made a string again."""

from __future__ import annotations

from typing import Any


class ContentPartsFlattener:
    """Mistral's Magistral streams its thinking as `delta.content` ARRAYS of
    `{"type": "thinking", "thinking": [{"type": "text", "text": …}]}` blocks (and sometimes
    `{"type": "text", "text": …}` blocks) before plain string content. A streamed `content` is a
    string in the chat-completions format: @ai-sdk/openai-compatible 1.x and 2.x reject every such
    chunk (`AI_TypeValidationError`) and lose the answer, and the OpenAI SDK accumulates a list.
    This sends the text blocks' text as `content` and the thinking text as `reasoning_content`,
    the field the AI SDK reads reasoning from. An array holding any other kind of block (an
    image, a block type nobody documented) goes on as received.

    The rule only: ContentPartsRepair (repairs/content_parts.py) is the link that applies it.
    """

    def flatten(self, delta: dict[str, Any]) -> bool:
        """Rewrite `delta["content"]` (a list) in place; False when it is left as received."""
        texts: list[str] = []
        thoughts: list[str] = []
        for block in delta["content"]:
            if not _collect(block, texts, thoughts):
                return False
        delta["content"] = "".join(texts) if texts else None
        if thoughts:
            earlier = delta.get("reasoning_content")
            delta["reasoning_content"] = (earlier if isinstance(earlier, str) else "") + "".join(
                thoughts
            )
        return True


def _collect(block: Any, texts: list[str], thoughts: list[str]) -> bool:
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        texts.append(block["text"])
        return True
    if kind != "thinking":
        return False
    thinking = block.get("thinking")
    if isinstance(thinking, str):
        thoughts.append(thinking)
        return True
    if not isinstance(thinking, list):
        return False
    for part in thinking:
        if not (isinstance(part, dict) and isinstance(part.get("text"), str)):
            return False
        thoughts.append(part["text"])
    return True
