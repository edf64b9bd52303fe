"""Reasoning the upstream wrote as `content` text, moved to the field clients read it from."""

from __future__ import annotations

from typing import Any

from proxy.repair.chunks import (
    choice_index,
    envelope,
    new_chunk,
    without_empty_choices,
)
from proxy.repair.markup.reasoning import ReasoningSplitter
from proxy.repair.markup.rules import MarkupRules
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally

# The fields an upstream that parses reasoning itself fills (DeepSeek and vLLM's
# `reasoning_content`, OpenRouter's and newer vLLM's `reasoning`): seeing either, the proxy
# leaves that choice's content alone.
UPSTREAM_REASONING_FIELDS = ("reasoning_content", "reasoning")


class TextReasoningRepair(Link):
    """A model served without its reasoning parser writes its reasoning into `content`:
    `<think>…</think>` before the answer (DeepSeek-R1 distills, QwQ and Qwen3 on vLLM, SGLang,
    llama.cpp or Ollama started without one), only `…</think>` when the chat template opened
    the block (DeepSeek-R1, Qwen3-Thinking-2507), or gpt-oss's harmony framing
    (`<|channel|>analysis<|message|>…<|end|>…<|channel|>final<|message|>…`) through a server
    that does not parse harmony. opencode, Open WebUI and the AI SDK then show the reasoning as
    the answer, and send it back as the assistant's words in the next turn.

    Per choice, the content is fed to a `ReasoningSplitter` as it streams; the reasoning goes
    into the route's reasoning field(s) (`reasoning_content`, `reasoning` or both), the rest
    stays `content`. Reasoning streams as it arrives; only a possible opener or a cut closing
    marker waits, a few bytes, and is released when the choice finishes (in its finish chunk)
    or the stream ends. A choice whose upstream fills a reasoning field itself, before or with
    its content, is left alone. Counted: `reasoning_from_text` once per choice whose reasoning
    moved, `reasoning_close_unopened` once per choice with a `</think>` nothing opened (the
    route should set `think_opened_by_template`). Built only for a route with `text_reasoning`.
    """

    def __init__(self, markup: MarkupRules, tally: Tally) -> None:
        self._tally = tally
        self._opened_by_template = markup.think_opened_by_template
        self._fields = markup.reasoning_fields()
        self._splitters: dict[int, ReasoningSplitter] = {}
        self._moved: set[int] = set()
        self._envelope: dict[str, Any] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        choices = chunk.get("choices")
        if type(choices) is not list:
            return None
        changed = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            index = choice.get("index", 0)
            if type(index) is not int:
                index = choice_index(choice)  # the one reading of a strange index
            splitter = self._splitters.get(index)
            if splitter is None:
                splitter = self._splitters[index] = ReasoningSplitter(self._opened_by_template)
                if not self._envelope:
                    self._envelope = envelope(chunk)
            delta = choice.get("delta")
            if splitter.plain:
                # The fast path: content decided as plain costs this lookup, and while no
                # `</think>` has been seen, one substring search of the piece.
                if splitter.watching and type(delta) is dict:
                    content = delta.get("content")
                    if type(content) is str and splitter.watch(content):
                        self._unopened_close(index)
                continue
            changed |= self._split(index, splitter, choice, delta)
        if not changed:
            return None
        return without_empty_choices(chunk)

    async def on_end(self) -> list[Chunk]:
        """Choices the upstream never finished: what their splitters still hold."""
        out: list[Chunk] = []
        for index in sorted(self._splitters):
            delta: dict[str, Any] = {}
            if self._write(index, delta, *self._splitters[index].finish()):
                out.append(new_chunk(self._envelope, {"index": index, "delta": delta}))
        return out

    def _split(
        self, index: int, splitter: ReasoningSplitter, choice: dict[str, Any], delta: Any
    ) -> bool:
        """Feed one choice's delta (and its finish) to its splitter; True when it changed."""
        if type(delta) is not dict:
            if choice.get("finish_reason") is None:
                return False
            delta = {}  # a finish with no delta: one for the held text, if there is any
        content = delta.get("content")
        if splitter.at_start and _has_reasoning(delta):
            # The upstream parses reasoning itself: whatever was held is its content.
            released = splitter.give_up()
            if not released:
                return False
            _put_content(delta, released, content)
            return True
        reasoning, text = "", ""
        if type(content) is str:
            already_unopened = splitter.unopened_close
            reasoning, text = splitter.feed(content)
            if splitter.unopened_close and not already_unopened:
                self._unopened_close(index)
        if choice.get("finish_reason") is not None:
            # Released before the finish, in the finish chunk's own delta.
            held_reasoning, held_text = splitter.finish()
            reasoning += held_reasoning
            text += held_text
        if not reasoning and (text == content or (not text and type(content) is not str)):
            return False
        if type(content) is not str:
            _put_content(delta, text, content)  # only what a finish released
        elif text:
            delta["content"] = text
        elif content:
            del delta["content"]  # emptied: "" would be one useless content delta per piece
        self._add_reasoning(index, delta, reasoning)
        choice["delta"] = delta
        return True

    def _unopened_close(self, index: int) -> None:
        """An anomaly left as it is, and logged: an operator should set the route's key."""
        self._tally.note(
            "reasoning_close_unopened",
            "choice %d: </think> with no <think> before it, left as content; if the chat "
            "template opens the block, set think_opened_by_template",
            index,
        )

    def _write(self, index: int, delta: dict[str, Any], reasoning: str, text: str) -> bool:
        if text:
            delta["content"] = text
        self._add_reasoning(index, delta, reasoning)
        return bool(reasoning or text)

    def _add_reasoning(self, index: int, target: dict[str, Any], reasoning: str) -> None:
        if not reasoning:
            return
        for field in self._fields:
            earlier = target.get(field)
            target[field] = (earlier if isinstance(earlier, str) else "") + reasoning
        if index not in self._moved:
            self._moved.add(index)
            self._tally.count("reasoning_from_text")


def _put_content(delta: dict[str, Any], text: str, content: Any) -> None:
    """Released text goes before what the delta says: held text came first. Content as a list
    of parts (flattened only later, by ContentPartsRepair) gets it as a leading text part."""
    if not text:
        return
    if type(content) is str:
        delta["content"] = text + content
    elif type(content) is list:
        delta["content"] = [{"type": "text", "text": text}, *content]
    else:
        delta["content"] = text


def _has_reasoning(container: dict[str, Any]) -> bool:
    return any(
        isinstance(value, str) and value
        for value in (container.get(field) for field in UPSTREAM_REASONING_FIELDS)
    )
