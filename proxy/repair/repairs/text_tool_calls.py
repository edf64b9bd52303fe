"""Tool calls that the upstream wrote as content, delivered as tool calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.repair.calls.declared import DeclaredTools
from proxy.repair.calls.ids import id_digest
from proxy.repair.chunks import choice_index, choices_of, envelope, new_chunk, without_empty_choices
from proxy.repair.forwarded import Forwarded
from proxy.repair.markup.recogniser import CallRecogniser, RecognisedCall
from proxy.repair.markup.spans import MarkupFamily
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally


class TextToolCallRepair(Link):
    """vLLM, llama.cpp, Ollama, LM Studio and MLX servers whose tool parser is missing, wrong
    for the model, or beaten by a small formatting slip send the model's own tool-call markup
    (`<tool_call>{…}</tool_call>`, Kimi's and DeepSeek's special tokens, Mistral's
    `[TOOL_CALLS]`, harmony's `to=functions.NAME`, …) as `content`. opencode, Open WebUI, Cline
    and the SDKs then show the markup and stop. This repair recognises the markup while it
    streams (proxy/repair/markup/) and hands the calls on as `tool_calls` entries with an id,
    so ToolCallRepair emits them like any other call and FinishReasonRepair says `tool_calls`.

    Built only for a route with `text_tool_calls` and a request that declared tools (and not
    `tool_choice: "none"`); only names it declared (as they went upstream: the model names its
    calls as it was told, and ToolNamesRestored gives the client's back), only arguments that
    validate against the tool's schema; anything else stays text, as received, counted. Text
    around the calls stays content, in order.
    """

    def __init__(
        self,
        forwarded: Forwarded,
        tally: Tally,
        tools: DeclaredTools,
        families: Sequence[MarkupFamily],
        max_span_chars: int,
    ) -> None:
        self._forwarded = forwarded
        self._tally = tally
        self._tools = tools
        self._families = families
        self._max_span = max_span_chars
        self._choices: dict[int, CallRecogniser] = {}
        self._finished: set[int] = set()
        self._envelope: dict[str, Any] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if delta is None and choice.get("finish_reason"):
                delta = {}  # a finish with no delta: what is held still goes out before it
            if not isinstance(delta, dict):
                continue
            index = choice_index(choice)
            content = delta.get("content")
            calls: list[RecognisedCall]
            text, calls = content, []
            if type(content) is str and content and index not in self._finished:
                text, calls = self._recogniser(index).feed(content)
            finish = choice.get("finish_reason")
            if finish and index not in self._finished:
                self._finished.add(index)
                recogniser = self._choices.get(index)  # none: no text came, nothing is held
                if recogniser is None:
                    continue
                rest, more = recogniser.finish(truncated=finish == "length")
                if rest or more:
                    text, calls = (text or "") + rest, calls + more
            if text == content and not calls:
                continue
            changed = True
            self._envelope = envelope(chunk)
            self._place(delta, content, text, calls, index)
            choice["delta"] = delta
        if not changed:
            return None
        return without_empty_choices(chunk)

    async def on_end(self) -> list[Chunk]:
        closing = []
        for index, recogniser in self._choices.items():
            if index in self._finished:
                continue
            self._finished.add(index)
            text, calls = recogniser.finish(truncated=False)
            delta: dict[str, Any] = {}
            self._place(delta, None, text, calls, index)
            if delta:
                closing.append(new_chunk(self._envelope, {"index": index, "delta": delta}))
        return closing

    def _recogniser(self, index: int) -> CallRecogniser:
        recogniser = self._choices.get(index)
        if recogniser is None:
            recogniser = self._choices[index] = CallRecogniser(
                self._families, self._tools, self._tally.count, self._max_span
            )
        return recogniser

    def _place(
        self,
        delta: dict[str, Any],
        content: object,
        text: object,
        calls: list[RecognisedCall],
        index: int,
    ) -> None:
        """Write a piece's text and calls into `delta`; content that became empty goes."""
        if text:
            delta["content"] = text
        elif type(content) is str and content:
            delta.pop("content", None)
        if calls:
            entries = delta.get("tool_calls")
            known = entries if isinstance(entries, list) else []
            recogniser = self._choices[index]
            first = recogniser.recognised - len(calls)
            delta["tool_calls"] = known + self._entries(index, calls, first)

    def _entries(
        self, choice: int, calls: list[RecognisedCall], first: int
    ) -> list[dict[str, Any]]:
        """Calls as delta (or message) entries: whole, with an index, a type and an id (the
        model's own where it wrote one; else derived, so a replayed exchange gets the same)."""
        turn = self._forwarded.turn
        entries = []
        for position, call in enumerate(calls, start=first):
            call_id = call.id or call.family.call_id(
                id_digest(
                    self._envelope.get("id"), turn, choice, position, call.name, call.arguments
                )
            )
            entries.append(
                {
                    "index": position,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            )
        return entries
