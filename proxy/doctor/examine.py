"""One answer examined: the client rules it breaks (`conformance.violations` for streams, the
same questions of a JSON message), calls reusing an id from the history, tool-call markup left
in the text, and a refusal (status and the upstream's own error message).

The same examination runs on the upstream's bytes and on the bytes the proxy sends a client, so
the two can be compared row by row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.repair.conformance import stream_chunks, violations
from proxy.wire import json_codec

# What a client does with an answer breaking a rule: (a pattern of the problem's text, the
# consequence). The first match names it; the sources are the README's table of quirks.
CONSEQUENCES: tuple[tuple[str, str], ...] = (
    (r": no id$", "the AI SDK 2.x rejects: Expected 'id' to be a string"),
    (r"no function\.name", "the AI SDK rejects: Expected 'function.name' to be a string"),
    (
        r"without an integer index",
        "OpenAI SDK .stream(): TypeError (list indices must be "
        "integers); Open WebUI ignores the call; create() loops merge parallel calls",
    ),
    (r"index \d+ out of order", "OpenAI SDK .stream(): IndexError: list index out of range"),
    (r"finished with 'stop'", "agent loops end after the tools run (opencode)"),
    (r"finish chunks, expected 1", "AI SDK 3.x: Response stream ended without a finish reason"),
    (r"\[DONE\]", "clients waiting for [DONE] hang or drop the last event"),
    (r"role repeated", "OpenAI Python SDK: role 'assistantassistant'"),
    (r"carries no role", "OpenAI SDK stream helper: message.role = None"),
    (r"type is not 'function'", "validation errors in typed clients"),
    (r"arguments is not a string", "typed clients reject the call"),
    (r"id reused", "Open WebUI drops the new calls and keeps their results: the chat breaks"),
    (r"markup", "the markup shown as text and the agent stops (opencode, Open WebUI, Cline)"),
    (
        r"System message must be at the beginning|role 'system'",
        "every client sending two system messages (opencode): the request fails",
    ),
    (r"stream_options", "every client asking for usage (stream_options): the request fails"),
    (r"^rejected", "every client: the request fails"),
    (r"^no answer", "every client: no answer"),
    (r"no tool call", "agent loops get no call to run"),
    (r"^no usage reported", "clients that show token counts get none"),
    (r"cut answer", "clients cannot tell a cut answer from a whole one; agents treat it as done"),
)

MARKUP = re.compile(r"<tool_call>|<\|tool_call|\[TOOL_CALLS\]|<\uff5ctool\u2581call|<function=")


@dataclass
class Problem:
    text: str
    informational: bool = False
    """Said on the row, but no client's request fails over it and the proxy cannot supply it:
    it leaves the verdict as it is."""

    @property
    def breaks(self) -> str:
        for pattern, consequence in CONSEQUENCES:
            if re.search(pattern, self.text):
                return consequence
        return "clients following OpenAI's format may misread it"


@dataclass
class Answer:
    """What one response said, read once: its status, error, calls and text."""

    status: int
    body: bytes
    streamed: bool
    calls: list[dict[str, Any]] = field(default_factory=list)
    """Each call's id, name and arguments as a client would assemble them."""
    text: str = ""
    finish: str | None = None
    """The (last) finish reason of the first choice."""
    late_finishes: list[tuple[Any, str | None]] = field(default_factory=list)
    """(choice index, finish reason) of each streamed choice that sent calls and finished
    otherwise than `tool_calls` (or `length`): judged per choice, so with `n` = 2 a choice of
    text ending `stop` beside a choice of calls ending `tool_calls` is right."""
    error: str = ""
    usage: bool = False
    """A usage object came (in any chunk, or on the JSON body)."""


def read_answer(status: int, body: bytes, streamed: bool) -> Answer:
    answer = Answer(status, body, streamed)
    if status >= 400 or status == 0:
        answer.error = error_message(body)
        return answer
    if streamed:
        _read_stream(answer)
    else:
        _read_json(answer)
    return answer


def error_message(body: bytes) -> str:
    """The upstream's message from an OpenAI-style error body (or a list of them, as Google
    sends), else the body's first line."""
    try:
        document: Any = json_codec.loads(body)
    except json_codec.JSONDecodeError:
        return body.decode("utf-8", "replace").strip().splitlines()[0][:200] if body else ""
    if isinstance(document, list) and document:
        document = document[0]
    if isinstance(document, dict):
        error = document.get("error", document)
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return message[:300]
        if isinstance(error, str):
            return error[:300]
    return body.decode("utf-8", "replace")[:200]


def _read_stream(answer: Answer) -> None:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    by_index: dict[Any, dict[str, Any]] = {}
    finishes: dict[Any, str] = {}
    choices_with_calls: set[Any] = set()
    for item in stream_chunks(answer.body):
        if not isinstance(item, dict):
            continue
        # OpenAI sends `"usage": null` on every chunk but the last when usage is asked for.
        answer.usage = answer.usage or isinstance(item.get("usage"), dict)
        for choice in item.get("choices") or ():
            number = choice.get("index", 0)
            delta = choice.get("delta") or {}
            if choice.get("finish_reason") is not None:
                finishes[number] = str(choice["finish_reason"])
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for entry in delta.get("tool_calls") or ():
                if not isinstance(entry, dict):
                    continue
                choices_with_calls.add(number)
                function = entry.get("function") or {}
                key = (number, entry.get("index"))
                call = by_index.get(key) if key[1] is not None else None
                opens = call is None or (entry.get("id") and entry.get("id") != call["id"])
                if key[1] is None and calls and not entry.get("id") and not function.get("name"):
                    call, opens = calls[-1], False  # an indexless continuation
                if opens:
                    call = {"id": entry.get("id") or "", "name": "", "arguments": ""}
                    calls.append(call)
                    by_index[key] = call
                assert call is not None
                call["name"] = call["name"] or function.get("name") or ""
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call["arguments"] += arguments
    answer.calls, answer.text = calls, "".join(text)
    answer.finish = finishes.get(0, next(iter(finishes.values()), None))
    answer.late_finishes = [
        (number, finishes.get(number))
        for number in sorted(choices_with_calls, key=str)
        if finishes.get(number) not in ("tool_calls", "length")
    ]


def _read_json(answer: Answer) -> None:
    try:
        document = json_codec.loads(answer.body)
        message = document["choices"][0]["message"]
    except (json_codec.JSONDecodeError, KeyError, IndexError, TypeError):
        answer.error = "not a chat completion"
        return
    answer.text = message.get("content") if isinstance(message.get("content"), str) else ""
    answer.usage = isinstance(document.get("usage"), dict)
    reason = document["choices"][0].get("finish_reason")
    answer.finish = None if reason is None else str(reason)
    for entry in message.get("tool_calls") or ():
        function = entry.get("function") or {} if isinstance(entry, dict) else {}
        answer.calls.append(
            {
                "id": entry.get("id") or "" if isinstance(entry, dict) else "",
                "name": function.get("name") or "",
                "arguments": function.get("arguments"),
            }
        )


def problems(answer: Answer, request: dict[str, Any], expects_calls: int) -> list[Problem]:
    """Everything wrong with one answer to `request`; empty when every client takes it."""
    if answer.status == 0:
        return [Problem(f"no answer: {answer.error}")]
    if answer.status >= 400:
        return [Problem(f"rejected: {answer.status} {answer.error}".strip())]
    found: list[str] = []
    if answer.streamed:
        found += _stream_rules(answer.body)
    else:
        found += _json_rules(answer)
    for number, finish in answer.late_finishes:
        # The rules stop at a call without index; the finish still counts (choice 0, the
        # usual n = 1, unnamed as before).
        stopped = f"sent calls but finished with {finish!r}"
        if not any(stopped in text for text in found):
            found.append(stopped if number == 0 else f"choice {number}: {stopped}")
    if MARKUP.search(answer.text):
        found.append("a tool call written as text markup in the content")
    elif expects_calls and not answer.calls:
        found.append("no tool call, though the request required one")
    history = _history_ids(request)
    for call in answer.calls:
        if call["id"] and call["id"] in history:
            found.append(f"call id reused from an earlier turn: {call['id']}")
    found += _cut_rules(answer, request)
    listed = [Problem(text) for text in found]
    if _asks_usage(request) and answer.streamed and not answer.usage:
        # Informational, not a failure: the stream is whole and every client takes it; only
        # the token counts are missing, which the proxy cannot invent (it never guesses), and
        # many OpenAI-compatible servers omit them. A `not_fixable` here would fail the run
        # (exit 1) over a counter, and would hide that the proxy did fix a refusal of
        # `stream_options` (learned, dropped, sent again: the request then succeeds).
        listed.append(Problem("no usage reported, though the request asked for it", True))
    return listed


def _asks_usage(request: dict[str, Any]) -> bool:
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _cut_rules(answer: Answer, request: dict[str, Any]) -> list[str]:
    """With a limit of one token any written answer is cut, and OpenAI says `length` then; a
    `stop` (llm-d/llm-d-inference-sim#29, huggingface/transformers#42157, ggml-org/llama.cpp
    #7198 said `stop` for a cut) or no finish at all hides the cut. A `stop` with nothing
    written is the model ending at once, which is not a cut."""
    limit = request.get("max_tokens", request.get("max_completion_tokens"))
    if limit != 1:
        return []
    if answer.finish is None:
        return ["a cut answer (max_tokens 1) with no finish reason"]
    if answer.finish != "length" and (answer.text or answer.calls):
        return [f"a cut answer (max_tokens 1) reported as {answer.finish!r}, not 'length'"]
    return []


def _stream_rules(body: bytes) -> list[str]:
    # The rules of a proper incremental stream: a call's arguments in fragments after its
    # opening delta is how OpenAI streams every call, and every client takes it. The atomic
    # rules (each call in one delta) are what the proxy promises under `tool_calls.emit =
    # "atomic"`, not what a client needs: judged by them, OpenAI's own stream was `fixed`.
    found = violations(body, emit="incremental")
    # One line per rule broken: a stream repeating a fault on every call says it once.
    seen: dict[str, str] = {}
    for text in found:
        text = re.sub(r"^chunk \d+: choice 0: ", "", text)  # where, not what: one line a rule
        seen.setdefault(re.sub(r"call \d+|choice \d+", "#", text), text)
    return list(seen.values())


def _json_rules(answer: Answer) -> list[str]:
    if answer.error:
        return [answer.error]
    found = []
    document = json_codec.loads(answer.body)
    choice = document["choices"][0]
    for entry in choice["message"].get("tool_calls") or ():
        if not isinstance(entry, dict) or not entry.get("id"):
            found.append("a call: no id")
        elif entry.get("type") != "function":
            found.append("a call: type is not 'function'")
        elif not (entry.get("function") or {}).get("name"):
            found.append("a call: no function.name")
        elif not isinstance(entry["function"].get("arguments"), str):
            found.append("a call: arguments is not a string")
    if answer.calls and choice.get("finish_reason") not in ("tool_calls", "length"):
        found.append(f"sent calls but finished with {choice.get('finish_reason')!r}")
    return found


def _history_ids(request: dict[str, Any]) -> set[str]:
    ids = set()
    for message in request.get("messages") or ():
        if isinstance(message, dict):
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    ids.add(call["id"])
    return ids
