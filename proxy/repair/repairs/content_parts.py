"""Streamed `content` as an array of typed blocks, made a string again (the link)."""

from __future__ import annotations

from proxy.repair.content_parts import ContentPartsFlattener
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally


class ContentPartsRepair(Link):
    """Mistral's Magistral streams its thinking as `delta.content` arrays of typed blocks; a
    streamed `content` is a string in the chat-completions format, and @ai-sdk/openai-compatible
    rejects every such chunk (`AI_TypeValidationError`) and loses the answer. Each delta whose
    content is such an array gets its text as `content` and its thinking as `reasoning_content`
    (proxy/repair/content_parts.py has the rule), counted `content_blocks_flattened`. Most deltas
    carry a string: one type test each."""

    _flattener = ContentPartsFlattener()

    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        choices = chunk.get("choices")
        if type(choices) is not list:
            return None
        changed = False
        for choice in choices:
            delta = choice.get("delta") if type(choice) is dict else None
            if type(delta) is not dict or type(delta.get("content")) is not list:
                continue  # the common case: string content, or none
            if self._flattener.flatten(delta):  # Magistral's blocks; rare
                self._tally.count("content_blocks_flattened")
                changed = True
        return [chunk] if changed else None
