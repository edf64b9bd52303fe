"""Adversarial streams through the whole strict chain (which raises on any repair exception):
every recognised call reaches the client whole, with an index, an id, a type and a name, ids
unique, the finish `tool_calls` (unless cut by length), and the body conformant."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.repair.conformance import stream_chunks, violations
from tests.repair.markup.test_family_streams import REQUEST as FAMILY_REQUEST
from tests.repair.markup.test_family_streams import SAMPLES, START_ONLY
from tests.repair.markup.test_recogniser import CALL, REQUEST
from tests.support.streams import assembled_calls, content, finish_reasons, repair_stream, sse

ENVELOPE = {"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 1, "model": "m"}
OSLO = CALL.replace("Paris", "Oslo")


def chunk(*choices: dict) -> dict:
    return {**ENVELOPE, "choices": list(choices)}


def choice(index: int = 0, finish: str | None = None, **delta: object) -> dict:
    return {"index": index, "delta": dict(delta), "finish_reason": finish}


def stream(*chunks: dict) -> bytes:
    return sse(chunk(choice(role="assistant", content="")), *chunks, "[DONE]")


def call_entries(body: bytes) -> list[dict]:
    """Every tool_calls entry as the client receives it, in order."""
    return [
        entry
        for item in stream_chunks(body)
        if isinstance(item, dict)
        for part in item.get("choices") or ()
        for entry in (part.get("delta") or {}).get("tool_calls") or ()
    ]


def assert_whole_calls(body: bytes) -> None:
    """Each call arrives in one entry with index, id, type, name and parseable arguments."""
    entries = call_entries(body)
    for entry in entries:
        assert isinstance(entry["index"], int) and entry["id"] and entry["type"] == "function"
        assert entry["function"]["name"] and isinstance(
            orjson.loads(entry["function"]["arguments"]), dict
        )
    ids = [entry["id"] for entry in entries]
    assert len(set(ids)) == len(ids)
    assert violations(body) == []


def test_a_finish_chunk_without_a_delta_still_ends_the_text_before_it() -> None:
    """Some servers send the last chunk as `{"index": 0, "finish_reason": "stop"}`, no delta:
    text held back (a partial opener) and the calls must come before that finish, not after."""
    body = repair_stream(
        stream(
            chunk(choice(content=CALL[:20])),
            chunk(choice(content=CALL[20:] + "\nok <")),
            chunk({"index": 0, "finish_reason": "stop"}),
        ),
        REQUEST,
    )
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather"]
    assert content(body) == {0: "ok <"}
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert_whole_calls(body)


def content_stream(answer: str, cuts_at: list[int], finish: str = "stop") -> bytes:
    points = sorted({0, len(answer), *(min(c, len(answer)) for c in cuts_at)})
    pieces = [answer[a:b] for a, b in itertools.pairwise(points)]
    return stream(*(chunk(choice(content=p)) for p in pieces), chunk(choice(finish=finish)))


FAMILIES_ANYWHERE = sorted(set(SAMPLES) - START_ONLY)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(FAMILIES_ANYWHERE), min_size=1, max_size=3),
    st.lists(st.integers(min_value=0, max_value=1500), max_size=10),
)
def test_calls_of_any_families_split_anywhere_reach_the_client_whole(
    names: list[str], cuts_at: list[int]
) -> None:
    answer = "Let me look.\n" + "\nThen\n".join(SAMPLES[name][0] for name in names) + "\nDone."
    expected = [call for name in names for call in SAMPLES[name][1]]
    body = repair_stream(content_stream(answer, cuts_at), FAMILY_REQUEST)
    calls = assembled_calls(body)[0]
    assert [(c["name"], orjson.loads(c["arguments"])) for c in calls] == expected
    assert content(body) == {0: "Let me look.\n" + "Then\n" * (len(names) - 1) + "Done."}
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert [entry["index"] for entry in call_entries(body)] == list(range(len(expected)))
    assert_whole_calls(body)


def test_two_choices_are_kept_apart() -> None:
    hermes, kimi = SAMPLES["hermes"][0], SAMPLES["kimi_k2"][0]
    first = [hermes[i : i + 7] for i in range(0, len(hermes), 7)]
    second = ["So: "] + [kimi[i : i + 5] for i in range(0, len(kimi), 5)]
    chunks = []
    for position in range(max(len(first), len(second))):
        parts = []
        if position < len(second):
            parts.append(choice(1, content=second[position]))
        if position < len(first):
            parts.append(choice(0, content=first[position]))
        chunks.append(chunk(*parts))
    chunks.append(chunk(choice(0, finish="stop"), choice(1, finish="stop")))
    body = repair_stream(sse(*chunks, "[DONE]"), FAMILY_REQUEST)
    calls = assembled_calls(body)
    assert [(c["name"], orjson.loads(c["arguments"])) for c in calls[0]] == SAMPLES["hermes"][1]
    assert [(c["name"], orjson.loads(c["arguments"])) for c in calls[1]] == SAMPLES["kimi_k2"][1]
    assert content(body) == {1: "So: "}
    assert finish_reasons(body) == {0: ["tool_calls"], 1: ["tool_calls"]}
    ids = [c["id"] for c in calls[0] + calls[1]]
    assert len(set(ids)) == len(ids)
    assert violations(body) == []


def test_a_chunk_with_content_and_finish_together() -> None:
    body = repair_stream(
        stream(chunk(choice(content=f"Hi {CALL} bye <tool_", finish="stop"))), REQUEST
    )
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather"]
    assert content(body) == {0: "Hi bye <tool_"}
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert_whole_calls(body)


@pytest.mark.parametrize("native_first", [True, False])
def test_native_calls_and_text_markup_in_one_choice_both_arrive_apart(native_first: bool) -> None:
    native = {
        "index": 0,
        "id": "call_native",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }
    parts = [chunk(choice(tool_calls=[native])), chunk(choice(content=CALL))]
    body = repair_stream(
        stream(*(parts if native_first else parts[::-1]), chunk(choice(finish="stop"))), REQUEST
    )
    cities = sorted(orjson.loads(c["arguments"])["city"] for c in assembled_calls(body)[0])
    assert cities == ["Paris", "Rome"]
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert_whole_calls(body)


def test_native_calls_and_markup_in_the_same_chunk_get_distinct_indexes() -> None:
    native = {
        "index": 0,
        "id": "call_native",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }
    body = repair_stream(
        stream(chunk(choice(content=CALL, tool_calls=[native])), chunk(choice(finish="stop"))),
        REQUEST,
    )
    assert len(assembled_calls(body)[0]) == 2
    assert_whole_calls(body)


@pytest.mark.parametrize("cut", [5, 11, 30, len(CALL) - 13, len(CALL) - 1])
def test_a_length_cut_through_a_call_is_text_and_length(cut: int) -> None:
    answer = "Checking. " + CALL[:cut]
    body = repair_stream(content_stream(answer, [3, 12, 20], finish="length"), REQUEST)
    assert content(body) == {0: answer}
    assert finish_reasons(body) == {0: ["length"]}
    assert 0 not in assembled_calls(body)
    assert violations(body) == []


@pytest.mark.parametrize(
    "request_",
    [
        {"messages": []},
        {**REQUEST, "tool_choice": "none"},
        {**REQUEST, "tool_choice": {"type": "function", "function": {"name": "other"}}},
    ],
)
def test_with_nothing_declared_the_stream_goes_on_byte_for_byte(request_: dict) -> None:
    raw = content_stream(f"a {CALL} b", [4, 9, 40])
    assert repair_stream(raw, request_) == raw


@pytest.mark.parametrize(
    "answer",
    [
        CALL.replace('"Paris"', "42"),  # invalid arguments
        CALL.replace("get_weather", "drop_tables"),  # undeclared
        f"```\n{CALL}\n```",  # in a fence
        CALL.replace("}}", "}"),  # unparsable
    ],
)
def test_refused_markup_goes_on_as_text_exactly(answer: str) -> None:
    body = repair_stream(content_stream(answer, [2, 17, 33]), REQUEST)
    assert content(body) == {0: answer} and 0 not in assembled_calls(body)
    assert finish_reasons(body) == {0: ["stop"]}
    assert violations(body) == []


def test_unicode_crlf_and_a_closing_tag_inside_a_string_value() -> None:
    city = "S\u00e3o Paulo </tool_call> \U0001f600"
    answer = (
        "x\r\n<tool_call>\r\n"
        + orjson.dumps({"name": "get_weather", "arguments": {"city": city}}).decode()
        + "\r\n</tool_call>\r\nDone"
    )
    body = repair_stream(content_stream(answer, list(range(0, len(answer), 3))), REQUEST)
    [call] = assembled_calls(body)[0]
    assert orjson.loads(call["arguments"]) == {"city": city}
    assert content(body) == {0: "x\r\nDone"}
    assert_whole_calls(body)


def test_an_inline_code_span_then_a_real_call_and_markup_after_a_fence() -> None:
    answer = "Use `<tool_call>` like so:\n```\n<tool_call>\n```\n" + CALL
    body = repair_stream(content_stream(answer, [1, 5, 6, 30, 31, 32]), REQUEST)
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather"]
    assert content(body) == {0: answer[: -len(CALL)]}
    assert_whole_calls(body)
