"""Several or late system messages merged into one leading system message."""

from __future__ import annotations

from typing import Any

from proxy.repair.messages.text_parts import text_of

SYSTEM_MERGED_KIND = "system_messages_merged"

# Between the texts of two merged messages: each stays a paragraph of its own.
MESSAGE_SEPARATOR = "\n\n"


class SystemMessagesMerged:
    """Qwen 3.5's and later chat templates raise `System message must be at the beginning.`
    for any system message not at index 0, and vLLM answers 400 (vllm#41114; llama.cpp,
    Ollama and LM Studio raise the same from the same template). Agents send exactly that:
    opencode two system messages by default (opencode#15059), Hermes Agent a late instruction
    (vllm#41114). vLLM's own attempted fix (vllm#44505) and opencode's coalesce them, in order,
    into the leading block; so does this: the one system message left is first, its content the
    text of every system message in order, separated by a blank line. A request with at most
    one system message, already first, is left as sent; so is one whose system content holds
    anything but text (an image cannot join a string)."""

    KIND = SYSTEM_MERGED_KIND

    def apply(self, messages: list[Any]) -> int:
        positions = [
            at
            for at, message in enumerate(messages)
            if isinstance(message, dict) and message.get("role") == "system"
        ]
        if not positions or positions == [0]:
            return 0
        texts = [text_of(messages[at].get("content")) for at in positions]
        if any(text is None for text in texts):
            return 0
        leading = messages[positions[0]]
        leading["content"] = MESSAGE_SEPARATOR.join(text for text in texts if text)
        moved = set(positions)
        messages[:] = [leading, *(m for at, m in enumerate(messages) if at not in moved)]
        # The messages that had to move: all of them but one already leading.
        return len(positions) - (1 if positions[0] == 0 else 0)
