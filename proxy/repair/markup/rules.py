"""What one route allows the markup repairs to do (from its `[upstream]` or `[[routes]]` table)."""

from __future__ import annotations

from dataclasses import dataclass

REASONING_FIELDS = ("reasoning_content", "reasoning", "both")
"""Where reasoning found in text goes: DeepSeek's `reasoning_content` (opencode, Open WebUI,
LiteLLM read it), OpenRouter's `reasoning` (the AI SDK's openai-compatible provider reads
either), or both, for clients that read only one of them."""


@dataclass(frozen=True, slots=True)
class MarkupRules:
    """Named as the route's keys are (`proxy/repair/rules.py`), which set them one to one."""

    text_tool_calls: bool = True
    """Recognise tool-call markup written as content."""
    text_reasoning: bool = True
    """Move `<think>` blocks and harmony's analysis channel out of content."""
    reasoning_field: str = "reasoning_content"
    think_opened_by_template: bool = False
    """The chat template writes `<think>` itself, so content starts inside the block and only
    `</think>` arrives."""

    def reasoning_fields(self) -> tuple[str, ...]:
        if self.reasoning_field == "both":
            return ("reasoning_content", "reasoning")
        return (self.reasoning_field,)
