"""A chat client modelled on Open WebUI v0.11's tool loop (open-webui#28305, PROTOCOL.md §1.4):
how it turns a streamed or non-streamed answer into stored messages, reconciles tool calls with
their results, and runs one request's rounds against a base URL."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.strict_upstream import (
    MODEL,
    TOOLS,
)

TIMEOUT = httpx.Timeout(30.0)  # one whole request


def tool_result(name: str, arguments: str) -> str:
    """What the client's tools return (Open WebUI hands back an error string when arguments
    do not parse, rather than failing the turn)."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return f"Error: invalid arguments for {name}: {exc}"
    if name == "add_memory":
        return "Memory saved."
    if name == "search_web":
        return f"3 results for {parsed.get('query')!r}"
    return f"Error: unknown tool {name}"


def convert_output_to_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open WebUI's rebuild of chat messages from its stored output items (v0.11, misc.py).

    - a `function_call` (and its `function_call_output`) is replayed only when its call id is
      both a completed call and has an output *somewhere in the list*, not per round;
    - text and calls collect into one pending assistant message; outputs are held back and,
      when the next non-call item (or the end) comes, the pending assistant message is flushed
      and then one `tool` message per output follows;
    - finally its sanitizer (`reconcile_tool_pairs`) drops results whose id no call in the
      whole list has and calls whose id no result in the whole list answers: ids are matched
      across the whole chat, never per assistant block, so a result of round two that answers
      a call id of round one passes.
    """
    completed = {
        item["call_id"]
        for item in output
        if item["type"] == "function_call" and item.get("status") == "completed"
    }
    with_result = {item["call_id"] for item in output if item["type"] == "function_call_output"}
    replayed = completed & with_result

    messages: list[dict[str, Any]] = []
    content: list[str] = []
    calls: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []

    def flush_assistant() -> None:
        nonlocal content, calls
        if content or calls:
            message: dict[str, Any] = {"role": "assistant", "content": "\n".join(content)}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        content, calls = [], []

    def flush_outputs() -> None:
        nonlocal outputs
        if outputs:
            flush_assistant()
            for item in outputs:
                text = "".join(p["text"] for p in item["output"] if p["type"] == "input_text")
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
        outputs = []

    for item in output:
        if item["type"] not in ("function_call", "function_call_output"):
            flush_outputs()
        if item["type"] == "message":
            text = "".join(p["text"] for p in item["content"] if p["type"] == "output_text")
            if text:
                content.append(text)
        elif item["type"] == "function_call" and item["call_id"] in replayed:
            calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
        elif item["type"] == "function_call_output" and item["call_id"] in replayed:
            outputs.append(item)
    flush_outputs()
    flush_assistant()
    return reconcile_tool_pairs(messages)


def reconcile_tool_pairs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open WebUI's history sanitizer: pairs calls and results by id across the whole list."""
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    requested = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    kept: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] in requested:
                kept.append(message)
            continue
        if not message.get("tool_calls"):
            kept.append(message)
            continue
        calls = [c for c in message["tool_calls"] if c["id"] in answered]
        if calls:
            kept.append({**message, "tool_calls": calls})
        elif message.get("content"):
            kept.append({k: v for k, v in message.items() if k != "tool_calls"})
    return kept


@dataclass
class Turn:
    """What one user request did in the client."""

    rounds: list[list[dict[str, Any]]] = field(default_factory=list)
    """The calls the client received, per round, as {id, name, arguments}."""
    output: list[dict[str, Any]] = field(default_factory=list)
    """Open WebUI's stored output items for the turn."""
    sent: list[dict[str, Any]] = field(default_factory=list)
    """Every request body the client sent."""
    answer: str = ""
    error: httpx.Response | None = None
    """The response that ended the turn with an error, if one did."""

    @property
    def received_ids(self) -> list[str]:
        return [call["id"] for calls in self.rounds for call in calls]

    @property
    def stored_call_ids(self) -> list[str]:
        return [item["call_id"] for item in self.output if item["type"] == "function_call"]

    @property
    def stored_result_ids(self) -> list[str]:
        return [item["call_id"] for item in self.output if item["type"] == "function_call_output"]


class OpenWebUIClient:
    """A chat client modelled on Open WebUI v0.11's native tool-calling loop (middleware.py),
    the code behind open-webui#28305 (PROTOCOL.md §1.4, §2.3).

    Within ONE user request it runs tool rounds until the model answers without calls, and
    keeps ONE output list for all rounds of the turn (Responses-style items: `message`,
    `function_call`, `function_call_output`). Each round:

    1. It streams the completion and accumulates tool-call deltas strictly by `index`: a delta
       without `index` is ignored; the first delta of an index opens the call (its `id`, `name`,
       `arguments`); later ones append `function.name` and `function.arguments` (v0.11
       concatenates a repeated name) and never change the id. Non-streamed answers are read
       from `message.tool_calls`.
    2. It appends the round's text as a `message` item.
    3. It computes `existing = {call ids already in output}` and appends a `function_call` item
       only for calls whose id is not in `existing`: a call whose id an earlier round used is
       silently suppressed.
    4. It runs EVERY call of the round, marks its stored call completed, and appends a
       `function_call_output` for every call, suppressed or not.
    5. It rebuilds the next request's messages as the chat before the turn plus
       `convert_output_to_messages(output)`: one assistant message with the kept calls per
       round, followed by a `tool` message for every stored output.

    With ids numbered per round (Kimi), round two's results of reused ids end up after an
    assistant message that lacks those calls: the request a strict upstream rejects, and the
    history Open WebUI stores for the chat.
    """

    def __init__(self, base_url: str, *, stream: bool = True, max_rounds: int = 6) -> None:
        self.base_url = base_url
        self.stream = stream
        self.max_rounds = max_rounds

    def run_turn(self, chat: list[dict[str, Any]]) -> Turn:
        turn = Turn()
        with httpx.Client(timeout=TIMEOUT) as http:
            for _ in range(self.max_rounds):
                body = {
                    "model": MODEL,
                    "messages": [*chat, *convert_output_to_messages(turn.output)],
                    "tools": TOOLS,
                    "stream": self.stream,
                }
                turn.sent.append(body)
                response = self._complete(http, body)
                if isinstance(response, httpx.Response):
                    turn.error = response
                    return turn
                text, calls = response
                if text:
                    turn.output.append(
                        {
                            "type": "message",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": text}],
                        }
                    )
                if not calls:
                    turn.answer = text
                    return turn
                turn.rounds.append(calls)
                existing = {i["call_id"] for i in turn.output if i["type"] == "function_call"}
                stored = {}
                for call in calls:
                    if call["id"] not in existing:
                        item = {
                            "type": "function_call",
                            "call_id": call["id"],
                            "name": call["name"],
                            "arguments": call["arguments"],
                            "status": "in_progress",
                        }
                        turn.output.append(item)
                        stored[call["id"]] = item
                for call in calls:
                    result = tool_result(call["name"], call["arguments"])
                    if call["id"] in stored:
                        stored[call["id"]]["status"] = "completed"
                    turn.output.append(
                        {
                            "type": "function_call_output",
                            "call_id": call["id"],
                            "output": [{"type": "input_text", "text": result}],
                        }
                    )
        raise AssertionError(f"no final answer after {self.max_rounds} rounds")

    def _complete(
        self, http: httpx.Client, body: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]]] | httpx.Response:
        url = f"{self.base_url}/chat/completions"
        if not self.stream:
            response = http.post(url, json=body)
            if response.status_code != 200:
                return response
            message = response.json()["choices"][0]["message"]
            calls = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message.get("tool_calls") or ()
            ]
            return message.get("content") or "", calls
        with http.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                response.read()
                return response
            text: list[str] = []
            by_index: list[dict[str, Any]] = []
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                for choice in json.loads(data).get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text.append(delta["content"])
                    for entry in delta.get("tool_calls") or ():
                        accumulate(by_index, entry)
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in by_index
        ]
        return "".join(text), calls


def accumulate(calls: list[dict[str, Any]], entry: dict[str, Any]) -> None:
    """Open WebUI's by-index accumulation of one tool-call delta entry."""
    index = entry.get("index")
    if index is None:
        return  # silently ignored
    current = next((c for c in calls if c["index"] == index), None)
    function = entry.get("function") or {}
    if current is None:
        calls.append(
            {
                "index": index,
                "id": entry.get("id"),
                "function": {
                    "name": function.get("name") or "",
                    "arguments": function.get("arguments") or "",
                },
            }
        )
        return
    current["function"]["name"] += function.get("name") or ""
    current["function"]["arguments"] += function.get("arguments") or ""
