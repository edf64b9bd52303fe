"""Conversation integrity end to end: unique tool-call ids across rounds, healed histories.

Every test runs real servers on loopback: the proxy (`running_proxy`, strict repairs) in front of
`tests/support/strict_upstream.py`, a Kimi-like upstream that numbers tool-call ids per round and
rejects, with OpenAI's 400s (PROTOCOL.md §1.6), any history a strict upstream rejects.

- The Open WebUI / Kimi report (open-webui#28305, PROTOCOL.md §1.4): a client modelled on Open
  WebUI v0.11's tool loop runs both rounds of one request. Through the proxy it sees all ten
  calls under ten distinct ids and every follow-up is accepted; straight at the upstream it
  suppresses round two's reused calls, stores their results anyway, and its next request gets
  the 400 (which proves the test can fail).
- The history that client stores without the proxy is healed by the proxy into one the strict
  upstream accepts; with `history.repair = false` the upstream's 400 reaches the client as is.
- A valid history crosses the proxy byte for byte; reused ids in non-streamed answers are
  rewritten too.
- The strict upstream itself rejects what it should and accepts valid histories.

The client modelled on Open WebUI is tests/support/open_webui.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.support.open_webui import (
    OpenWebUIClient,
    accumulate,
    tool_result,
)
from tests.support.proxies import running_proxy
from tests.support.strict_upstream import (
    FINAL_ANSWER,
    MAX_ID_LENGTH,
    MODEL,
    ROUND_ONE,
    ROUND_TWO,
    TOOL_WITHOUT_CALLS_MESSAGE,
    TOOLS,
    Rejected,
    ScriptedCall,
    Step,
    StrictUpstream,
    TextAnswer,
    ToolRound,
    duplicate_call_message,
    not_found_message,
    running_strict_upstream,
    too_long_message,
    unanswered_message,
    validate,
)

TIMEOUT = httpx.Timeout(30.0)
VALID_ID = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
KIMI_ID = re.compile(r"functions\.(?P<name>[A-Za-z0-9_.-]+):(?P<n>\d+)")
QUESTION = {"role": "user", "content": "What is new in EV batteries? Remember that I follow this."}


# ── helpers ──────────────────────────────────────────────────────────────────


@contextmanager
def strict_behind_proxy(
    script: list[Step] | None = None, **proxy_config: Any
) -> Iterator[tuple[StrictUpstream, str]]:
    """(the strict fake, the proxy's OpenAI base URL)."""
    with (
        running_strict_upstream(script) as (fake, root),
        running_proxy(f"{root}/v1", **proxy_config) as proxy,
    ):
        yield fake, f"{proxy}/v1"


def post(base_url: str, body: dict[str, Any] | bytes) -> httpx.Response:
    """One chat completion; a streamed answer is read whole."""
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {"content-type": "application/json"}
    return httpx.post(f"{base_url}/chat/completions", content=content, headers=headers, timeout=30)


def calls_in_answer(response: httpx.Response) -> list[dict[str, Any]]:
    """{id, name, arguments} of the answer's calls, streamed (by index) or not."""
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        message = response.json()["choices"][0]["message"]
        return [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message.get("tool_calls") or ()
        ]
    by_index: list[dict[str, Any]] = []
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            for choice in json.loads(line[5:]).get("choices") or ():
                for entry in (choice.get("delta") or {}).get("tool_calls") or ():
                    accumulate(by_index, entry)
    return [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in by_index
    ]


def text_in_answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.json()["choices"][0]["message"].get("content") or ""
    pieces = []
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            for choice in json.loads(line[5:]).get("choices") or ():
                pieces.append((choice.get("delta") or {}).get("content") or "")
    return "".join(pieces)


def as_sent(round_: ToolRound, ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The round's calls as the client should see them, under `ids` (default: the script's)."""
    ids = ids or [c.id for c in round_.calls]
    return [
        {"id": i, "name": c.name, "arguments": c.arguments_json}
        for i, c in zip(ids, round_.calls, strict=True)
    ]


def call_ids_in(messages: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or ()]


def assistant(round_: ToolRound, ids: list[str]) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
        for i, c in zip(ids, round_.calls, strict=True)
    ]
    return {"role": "assistant", "content": round_.text, "tool_calls": calls}


def results(round_: ToolRound, ids: list[str]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": i, "content": tool_result(c.name, c.arguments_json)}
        for i, c in zip(ids, round_.calls, strict=True)
    ]


def assert_fresh_kimi_ids(new: list[str], used_before: list[str]) -> None:
    """Each id valid, in Kimi's `functions.NAME:N` shape, with an N the conversation has not
    used (for any name) before it, and no two alike."""
    used = {int(m["n"]) for i in used_before if (m := KIMI_ID.fullmatch(i))}
    for call_id in new:
        assert len(call_id) <= MAX_ID_LENGTH and VALID_ID.fullmatch(call_id), call_id
        match = KIMI_ID.fullmatch(call_id)
        assert match and match["name"] == "search_web", call_id
        assert int(match["n"]) not in used, f"{call_id} reuses a number of {sorted(used)}"
        used.add(int(match["n"]))


ROUND_ONE_IDS = [c.id for c in ROUND_ONE.calls]
ROUND_TWO_IDS = [c.id for c in ROUND_TWO.calls]
# What the proxy makes of round two: `:0` collides with nothing (round one has `add_memory:0`),
# the rest take the next numbers after the highest in the conversation.
ROUND_TWO_REWRITTEN = [
    "functions.search_web:0",
    "functions.search_web:5",
    "functions.search_web:6",
    "functions.search_web:7",
    "functions.search_web:8",
]
AFTER_ROUND_ONE = [
    QUESTION,
    assistant(ROUND_ONE, ROUND_ONE_IDS),
    *results(ROUND_ONE, ROUND_ONE_IDS),
]

# What Open WebUI stores without the proxy (open-webui#28305): round one's block intact, then
# round two's assistant message with the one call whose id was new, and all five results.
BROKEN_ROUND_TWO = [
    assistant(ToolRound(ROUND_TWO.calls[:1], ROUND_TWO.text), ROUND_TWO_IDS[:1]),
    *results(ROUND_TWO, ROUND_TWO_IDS),
]
BROKEN_HISTORY = [*AFTER_ROUND_ONE, *BROKEN_ROUND_TWO]

MODES = [
    pytest.param(True, "atomic", id="stream-atomic"),
    pytest.param(True, "incremental", id="stream-incremental"),
    pytest.param(False, "atomic", id="json"),
]


# ── the Open WebUI / Kimi case end to end ────────────────────────────────────


@pytest.mark.parametrize(("stream", "emit"), MODES)
def test_open_webui_sees_every_call_and_upstream_accepts_every_follow_up(
    stream: bool, emit: str
) -> None:
    with strict_behind_proxy(**{"tool_calls.emit": emit}) as (fake, base_url):
        turn = OpenWebUIClient(base_url, stream=stream).run_turn([QUESTION])

    assert turn.error is None, turn.error.text if turn.error else ""
    assert [status for status, _ in fake.responses] == [200, 200, 200]
    assert turn.answer == FINAL_ANSWER.text

    # Every call of both rounds reached the client, complete, under ten distinct ids.
    assert turn.rounds == [as_sent(ROUND_ONE), as_sent(ROUND_TWO, ROUND_TWO_REWRITTEN)]
    assert len(set(turn.received_ids)) == 10
    assert_fresh_kimi_ids(turn.received_ids[6:], turn.received_ids[:6])
    # Nothing was suppressed: Open WebUI stored every call and every result.
    assert turn.stored_call_ids == turn.received_ids
    assert turn.stored_result_ids == turn.received_ids

    # The upstream got the two rounds as two proper blocks.
    last = fake.requests[-1].json["messages"]
    assert call_ids_in(last) == ROUND_ONE_IDS + ROUND_TWO_REWRITTEN
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == turn.received_ids


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_without_proxy_open_webui_breaks_the_chat(stream: bool) -> None:
    """The same client straight at the strict upstream: the test above can fail."""
    with running_strict_upstream() as (fake, root):
        turn = OpenWebUIClient(f"{root}/v1", stream=stream).run_turn([QUESTION])

    # Round two's reused ids reached the client as is, and four of its calls were suppressed
    # while all five results were stored.
    assert turn.rounds == [as_sent(ROUND_ONE), as_sent(ROUND_TWO)]
    assert turn.stored_call_ids == [*ROUND_ONE_IDS, "functions.search_web:0"]
    assert turn.stored_result_ids == ROUND_ONE_IDS + ROUND_TWO_IDS

    # The follow-up is the broken history, and the strict upstream rejects it.
    assert turn.sent[-1]["messages"] == BROKEN_HISTORY
    assert turn.error is not None and turn.error.status_code == 400
    assert turn.error.json() == {
        "error": {
            "message": not_found_message("functions.search_web:1"),
            "type": "invalid_request_error",
            "param": "messages.[9].tool_call_id",
            "code": None,
        }
    }
    assert [status for status, _ in fake.responses] == [200, 200, 400]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_rewritten_ids_are_deterministic(stream: bool) -> None:
    """The same request twice (a client retry) gets the same ids, streamed or not."""
    body = {"model": MODEL, "messages": AFTER_ROUND_ONE, "tools": TOOLS, "stream": stream}
    with strict_behind_proxy() as (_, base_url):
        first = calls_in_answer(post(base_url, body))
        second = calls_in_answer(post(base_url, body))
    assert first == second == as_sent(ROUND_TWO, ROUND_TWO_REWRITTEN)


# ── an already broken stored history ─────────────────────────────────────────


def orphans_removed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BROKEN_HISTORY as it must reach the upstream: round two's four results for calls that
    round two's assistant message does not have are gone; nothing else changes."""
    orphan_ids = set(ROUND_TWO_IDS[1:])
    start = len(AFTER_ROUND_ONE)
    head, tail = messages[:start], messages[start:]
    return [*head, *(m for m in tail if m.get("tool_call_id") not in orphan_ids)]


@pytest.mark.parametrize(
    ("ending", "expected_answer"),
    [
        pytest.param([], FINAL_ANSWER, id="retry"),
        pytest.param([{"role": "user", "content": "thanks"}], ROUND_ONE, id="next-message"),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_broken_history_is_healed(stream: bool, ending: list[dict], expected_answer: Step) -> None:
    messages = [*BROKEN_HISTORY, *ending]
    body = {"model": MODEL, "messages": messages, "tools": TOOLS, "stream": stream}
    with strict_behind_proxy() as (fake, base_url):
        response = post(base_url, body)
        calls = calls_in_answer(response)

    assert [status for status, _ in fake.responses] == [200]
    received = fake.requests[0].json["messages"]
    assert received == orphans_removed(messages)
    assert len(messages) - len(received) == 4
    if isinstance(expected_answer, TextAnswer):
        assert calls == []
        assert text_in_answer(response) == expected_answer.text
        return
    # After "thanks" Kimi starts again at round one, whose ids collide with the history: the
    # proxy renumbers every one of them past the conversation's highest N.
    assert [c["name"] for c in calls] == [c.name for c in ROUND_ONE.calls]
    history_ids = call_ids_in(messages)
    assert not {c["id"] for c in calls} & set(history_ids)
    assert [c["id"] for c in calls] == [
        f"functions.{c.name}:{n}" for n, c in zip(range(5, 10), ROUND_ONE.calls, strict=True)
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_broken_history_without_repair_gets_the_upstream_400(stream: bool) -> None:
    raw = orjson.dumps({"model": MODEL, "messages": BROKEN_HISTORY, "stream": stream})
    with strict_behind_proxy(**{"history.repair": False}) as (fake, base_url):
        response = post(base_url, raw)

    assert fake.requests[0].raw == raw  # forwarded as is
    assert len(fake.responses) == 1
    status, body = fake.responses[0]
    assert status == 400
    assert (response.status_code, response.content) == (status, body)
    assert response.json()["error"]["message"] == not_found_message("functions.search_web:1")


# ── a valid history passes byte for byte ─────────────────────────────────────

# Two proper rounds with distinct ids (what the proxy makes of Kimi's), written by hand: odd
# spacing, keys out of the usual order, U+2028 both escaped and raw, non-ASCII text.
VALID_RAW = (
    '{ "stream" : %s,"messages":[\n'
    '  {"content":"What is new in EV batteries?\\u2028Remember that.","role":"user"},\n'
    '  {"tool_calls":[{"function":{"arguments":"{\\"content\\": \\"EVs\\"}","name":"add_memory"},'
    '"type":"function","id":"functions.add_memory:0"},'
    '{"type":"function","id":"functions.search_web:1","function":{"name":"search_web",'
    '"arguments":"{\\"query\\":\\"solid-state\\u2028battery\\"}"}}],"role":"assistant",'
    '"content":"Searching\u2028\u2026"},\n'
    '  {"role":"tool","content":"Memory saved.","tool_call_id":"functions.add_memory:0"},\n'
    '  {"tool_call_id":"functions.search_web:1","role":"tool","content":"r\u00e9sultats"},\n'
    '  {"role":"assistant","content":null,"tool_calls":[{"id":"functions.search_web:0",'
    '"type":"function","function":{"name":"search_web","arguments":"{}"}},'
    '{"id":"functions.search_web:5","type":"function","function":{"name":"search_web",'
    '"arguments":"{\\"query\\" : \\"x\\"}"}}]},\n'
    '  {"role":"tool","tool_call_id":"functions.search_web:5","content":"second"},\n'
    '  {"role":"tool","tool_call_id":"functions.search_web:0","content":"first"}\n'
    '] ,"model":"kimi-k2-0905-preview",   "tools":%s}'
)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_valid_history_passes_byte_identical(stream: bool) -> None:
    raw = (VALID_RAW % ("true" if stream else "false", json.dumps(TOOLS, indent=1))).encode()
    assert "\u2028".encode() in raw and b"\\u2028" in raw
    validate(json.loads(raw)["messages"])  # it is valid
    with strict_behind_proxy() as (fake, base_url):
        response = post(base_url, raw)
    assert response.status_code == 200, response.text
    assert fake.requests[0].raw == raw


# ── non-streamed answers ─────────────────────────────────────────────────────


def test_reused_id_in_a_non_streamed_answer_is_rewritten() -> None:
    body = {"model": MODEL, "messages": AFTER_ROUND_ONE, "tools": TOOLS}
    with strict_behind_proxy() as (fake, base_url):
        response = post(base_url, body)
    assert response.headers["content-type"].startswith("application/json")
    upstream = orjson.loads(fake.responses[0][1])["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in upstream] == ROUND_TWO_IDS  # the upstream did reuse them
    message = response.json()["choices"][0]["message"]
    assert [c["id"] for c in message["tool_calls"]] == ROUND_TWO_REWRITTEN
    assert [c["function"] for c in message["tool_calls"]] == [c["function"] for c in upstream]
    assert response.json()["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_reused_opaque_id_becomes_call_hex(stream: bool) -> None:
    """An id without Kimi's shape that an earlier round used becomes `call_<24 hex>`; the
    other call of the round, whose id is new, is not touched."""
    long_id = "toolu_" + "a" * 34  # 40 characters: the longest id a strict upstream accepts
    first = ToolRound((ScriptedCall(long_id, "search_web", {"query": "a"}),))
    second = ToolRound(
        (
            ScriptedCall(long_id, "search_web", {"query": "b"}),
            ScriptedCall("toolu_new", "search_web", {"query": "c"}),
        )
    )
    history = [QUESTION, assistant(first, [long_id]), *results(first, [long_id])]
    body = {"model": MODEL, "messages": history, "tools": TOOLS, "stream": stream}
    with strict_behind_proxy([first, second, FINAL_ANSWER]) as (fake, base_url):
        calls = calls_in_answer(post(base_url, body))
        again = calls_in_answer(post(base_url, body))
        renamed, kept = calls
        assert re.fullmatch(r"call_[0-9a-f]{24}", renamed["id"]), renamed
        assert kept["id"] == "toolu_new"
        assert again == calls
        # The follow-up with both calls answered is accepted.
        follow_up = [*history, assistant(second, [renamed["id"], kept["id"]])]
        follow_up += results(second, [renamed["id"], kept["id"]])
        response = post(base_url, {**body, "messages": follow_up})
    assert response.status_code == 200, response.text
    assert [status for status, _ in fake.responses] == [200, 200, 200]


# ── the strict upstream itself ───────────────────────────────────────────────


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _asst(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in ids]}


def _tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "go"}


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([USER, _tool("a")], TOOL_WITHOUT_CALLS_MESSAGE),
        ([USER, {"role": "assistant", "content": "hi"}, _tool("a")], TOOL_WITHOUT_CALLS_MESSAGE),
        ([USER, _asst("a"), _tool("b")], not_found_message("b")),
        (
            [USER, _asst("a"), _tool("a"), _asst("b"), _tool("b"), _tool("a")],
            not_found_message("a"),
        ),
        ([USER, _asst("a", "b"), _tool("a"), USER], unanswered_message(["b"])),
        ([USER, _asst("a", "b", "c"), _tool("b")], unanswered_message(["a", "c"])),
        ([USER, _asst("a", "a"), _tool("a"), _tool("a")], duplicate_call_message("a")),
        ([USER, _asst("a"), _tool("a"), _asst("a"), _tool("a")], duplicate_call_message("a")),
        ([USER, _asst("a", "b"), _tool("a"), _tool("a")], duplicate_call_message("a")),
        (
            [USER, _asst("x" * 41), _tool("x" * 41)],
            too_long_message("messages[1].tool_calls[0].id", 41),
        ),
    ],
)
def test_strict_upstream_rejects(messages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(Rejected) as caught:
        validate(messages)
    assert caught.value.message == message


def test_strict_upstream_accepts_valid_histories_and_answers_by_round() -> None:
    validate([USER, _asst("a", "b"), _tool("b"), _tool("a"), USER, _asst("c"), _tool("c")])
    validate([USER, _asst("x" * 40), _tool("x" * 40)])
    with running_strict_upstream() as (fake, root):
        for stream in (True, False):
            first = calls_in_answer(
                post(f"{root}/v1", {"model": MODEL, "messages": [QUESTION], "stream": stream})
            )
            assert first == as_sent(ROUND_ONE)
            second = post(
                f"{root}/v1", {"model": MODEL, "messages": AFTER_ROUND_ONE, "stream": stream}
            )
            assert calls_in_answer(second) == as_sent(ROUND_TWO)
            history = [*AFTER_ROUND_ONE, assistant(ROUND_TWO, ROUND_TWO_REWRITTEN)]
            history += results(ROUND_TWO, ROUND_TWO_REWRITTEN)
            third = post(f"{root}/v1", {"model": MODEL, "messages": history, "stream": stream})
            assert calls_in_answer(third) == []
            assert text_in_answer(third) == FINAL_ANSWER.text
        rejected = post(f"{root}/v1", {"model": MODEL, "messages": [USER, _tool("a")]})
    assert rejected.status_code == 400
    assert rejected.json() == {
        "error": {
            "message": TOOL_WITHOUT_CALLS_MESSAGE,
            "type": "invalid_request_error",
            "param": "messages.[1].role",
            "code": None,
        }
    }
    assert len(fake.requests) == 7
