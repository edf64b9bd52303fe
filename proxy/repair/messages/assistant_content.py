"""The content beside an assistant message's tool calls, as null or as "" as the upstream wants."""

from __future__ import annotations

from typing import Any

from proxy.wire.json_shapes import objects_in

ASSISTANT_CONTENT_KIND = "assistant_content_normalised"


class AssistantContentNormalised:
    """OpenAI takes an assistant message with `tool_calls` whose content is null, missing or
    "". Upstreams disagree on which. Mistral answers 400 `Assistant message must have either
    content or tool_calls, but not both.` to calls beside a content (langchain#21196), and its
    schema types the content `string | null` (vercel/ai#14888): with `want="null"` an empty
    content ("" or no parts) beside calls becomes null. LM Studio rejects null with `Invalid
    'content': 'content' field must be a string or an array of objects.` (lmstudio#261), as does
    mistral-common's OpenAI endpoint (mistral-common#324): with `want="empty"` a null or
    missing content beside calls becomes "". A content with text is never touched, nor a
    message without calls."""

    KIND = ASSISTANT_CONTENT_KIND

    def __init__(self, want: str) -> None:
        self._want = want

    def apply(self, messages: list[Any]) -> int:
        changed = 0
        for message in objects_in(messages):
            if message.get("role") != "assistant" or not message.get("tool_calls"):
                continue
            content = message.get("content")
            if self._want == "null" and content in ("", []):
                message["content"] = None
                changed += 1
            elif self._want == "empty" and content is None:
                message["content"] = ""
                changed += 1
        return changed
