"""A tool result given as an array of text parts, sent as one string."""

from __future__ import annotations

from typing import Any

from proxy.repair.messages.text_parts import text_of
from proxy.wire.json_shapes import objects_in

TOOL_CONTENT_KIND = "tool_content_flattened"


class ToolContentFlattened:
    """OpenAI's schema lets a `tool` message's content be a string or an array of text parts,
    and clients send the array (Qwen Code by default, kimi-cli for multi-part results).
    Upstreams that deserialize it into a string reject the request: Moonshot's Kimi with 400
    `Failed to deserialize the JSON body into the target type: messages[3]: invalid type:
    sequence, expected a string` (kimi-cli#1762), llama-style servers with `tool messages must
    contain string content` (ninfer#56). The parts' texts are joined into one string (as vLLM
    joins them); a content holding any part but text is left as sent."""

    KIND = TOOL_CONTENT_KIND

    def apply(self, messages: list[Any]) -> int:
        changed = 0
        for message in objects_in(messages):
            content = message.get("content")
            if message.get("role") != "tool" or not isinstance(content, list):
                continue
            text = text_of(content)
            if text is not None:
                message["content"] = text
                changed += 1
        return changed
