"""`streamfix explain` on Responses and Messages cassettes, through the real CLI: the whole
exchange as the client lived it. (1) the client's own request and the chat request it became,
with what the translation counted; (2) the chat request's repairs; (3) the chat answer's events,
each change with its repair; (4) the front events each repaired chat event became, and the
terminal; and whether what the client was sent then is today's answer. The exchange replays the
client's own request through its front's door, as `streamfix replay` does.

The cassettes are recorded here, by the real OpenAI and Anthropic client libraries through a
recording proxy on a loopback port, against fakes whose answers need repairs
(front_recordings.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.fronts.messages.replay import without_pings
from proxy.fronts.responses.replay import without_keepalives
from proxy.replay_check import check_cassette, check_directory
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette
from tests.explain.front_recordings import DEEPSEEK_CASES, GEMINI_CASES, record_front_exchanges
from tests.explain.test_explain import document, explain, labels_of

FINISH_REWRITE = (
    r'\[FinishReasonRepair: [^\]]*\]\n\s+~ choices\[0\]\.finish_reason: "stop" → "tool_calls"'
)


@pytest.fixture(scope="module")
def cassettes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_front_exchanges(tmp_path_factory.mktemp("fronts"))


def text_of(cassettes: Path, name: str) -> str:
    result = explain(str(cassettes / f"{name}.json"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def only(cassettes: Path, name: str) -> dict[str, Any]:
    [cassette] = document(str(cassettes / f"{name}.json"))["cassettes"]
    return cassette


def row_block(text: str, number: int) -> str:
    """Row `#number` of the text, up to the next row or section."""
    found = re.search(rf"^#{number}\b.*?(?=^#\d|^front end|^not tied|^front:)", text, re.M | re.S)
    assert found, text
    return found.group(0)


def front_lines(block: str) -> list[Any]:
    """The JSON of every `front` line in a block of the text."""
    return [json.loads(line) for line in re.findall(r"^  front(?: \d+)?\s+(\{.*)$", block, re.M)]


def recorded_events(client_body: bytes) -> list[Any]:
    """The data of every event the client was sent."""
    return [
        json.loads(line[6:]) for line in client_body.decode().split("\n") if line[:6] == "data: "
    ]


# (1)-(4) for a Responses stream: Gemini's indexless call ending with "stop".


def test_a_responses_stream_shows_the_whole_exchange(cassettes: Path) -> None:
    out = text_of(cassettes, "responses-stream")
    # (1) The client's request and the chat request it became: instructions -> system message.
    assert "front request (Responses, POST /v1/responses, streamed to the client):" in out
    assert "  client    input items: message 1; instructions: 1; tools: function 2" in out
    assert "  chat      messages: system 1, user 1; tools: 2" in out
    # (2) The chat request's repairs, as for a chat client.
    assert "\nrequest: unchanged\n" in out
    # (3) The answer's events with their repairs: the finish rewrite on the second event.
    finish = row_block(out, 2)
    assert re.search(FINISH_REWRITE, finish), finish
    assert "[ToolCallRepair: tool_call_index_added (split into 2)]" in finish
    # (4) Under it, the Responses events the repaired call became.
    added, arguments = front_lines(finish)
    assert added["type"] == "response.output_item.added"
    assert added["item"]["type"] == "function_call" and added["item"]["call_id"] == "623rbkd0"
    assert arguments["type"] == "response.function_call_arguments.delta"
    assert arguments["item_id"] == added["item"]["id"]  # keyed by item id, never the call id
    # The opening before any event, the terminal last.
    start = out[out.index("front start") : out.index("#1")]
    assert [e["type"] for e in front_lines(start)] == ["response.created", "response.in_progress"]
    ending = front_lines(out[out.index("front end") :])
    assert ending[-1]["type"] == "response.completed"
    assert ending[-1]["response"]["status"] == "completed"
    assert "front: today's answer is what the client was sent" in out


def test_a_messages_stream_shows_the_whole_exchange(cassettes: Path) -> None:
    out = text_of(cassettes, "messages-stream")
    assert "front request (Messages, POST /v1/messages, streamed to the client):" in out
    assert "  client    messages: user 1; blocks: text 1; tools: 2" in out
    assert "  chat      messages: user 1; tools: 2" in out
    finish = row_block(out, 2)
    assert re.search(FINISH_REWRITE, finish), finish
    start, delta, stop = front_lines(finish)
    assert start["type"] == "content_block_start"
    assert (
        start["content_block"]["type"] == "tool_use" and start["content_block"]["id"] == "623rbkd0"
    )
    assert delta["delta"] == {
        "type": "input_json_delta",
        "partial_json": '{"filePath":"/src/gateway.go"}',
    }
    assert stop == {"type": "content_block_stop", "index": 0}
    # The rewritten finish is the terminal's stop_reason: tool_use, never end_turn.
    message_delta, message_stop = front_lines(out[out.index("front end") :])
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert message_stop == {"type": "message_stop"}
    assert "front: today's answer is what the client was sent" in out


def test_whole_answers_show_the_body_the_client_got(cassettes: Path) -> None:
    responses = text_of(cassettes, "responses-whole")
    assert "front request (Responses, POST /v1/responses, one body to the client):" in responses
    assert "[ToolCallRepair: tool_call_type_added" in responses
    [body] = front_lines(responses[responses.index("front answer") :])
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["type"] == "function_call"
    messages = text_of(cassettes, "messages-whole")
    [message] = front_lines(messages[messages.index("front answer") :])
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0]["type"] == "tool_use"
    for out in (responses, messages):
        assert "front: today's answer is what the client was sent" in out


# The DeepSeek reasoning answer, and its follow-up bringing the reasoning back.


def test_reasoning_becomes_the_fronts_reasoning_events(cassettes: Path) -> None:
    responses = text_of(cassettes, "responses-deepseek-turn")
    kinds = [event["type"] for event in front_lines(responses)]
    assert "response.reasoning_summary_text.delta" in kinds
    assert "[ReceiptCapture: reasoning_content_captured (at end)]" in responses
    messages = text_of(cassettes, "messages-deepseek-turn")
    deltas = [
        e["delta"]["type"] for e in front_lines(messages) if e["type"] == "content_block_delta"
    ]
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas
    assert deltas[-1] == "input_json_delta"


def test_a_follow_up_shows_what_the_translation_folded_and_restored(cassettes: Path) -> None:
    responses = text_of(cassettes, "responses-deepseek-follow-up")
    assert (
        "  client    input items: message 1, reasoning 1, function_call 1, "
        "function_call_output 1; tools: function 2; receipt tokens: 1"
    ) in responses
    assert "  chat      messages: user 1, assistant 1, tool 1; tool calls: 1; tools: 2" in responses
    # The replay's translation has no store to restore the receipts from (a cassette holds
    # none, and the token was minted for another tenant): what it counted is said beside what
    # the recorded one did, and only what the replay counted is in its totals.
    assert "    [translation: responses_foreign_receipt_token (replayed)]" in responses
    assert (
        "    [translation: responses_receipts_restored (recorded, from the proxy's store, "
        "which a cassette does not hold)]"
    ) in responses
    assert re.search(r"^totals: .*responses_foreign_receipt_token=1", responses, re.M)
    assert "responses_receipts_restored=" not in responses.split("totals:")[-1]
    messages = text_of(cassettes, "messages-deepseek-follow-up")
    assert (
        "  client    messages: user 2, assistant 1; blocks: text 1, thinking 1, tool_use 1, "
        "tool_result 1; tools: 2; receipt tokens: 1"
    ) in messages
    assert "  chat      messages: user 1, assistant 1, tool 1; tool calls: 1; tools: 2" in messages
    assert "    [translation: messages_receipts_restored (recorded, from the" in messages


# --json: the same, per event, and it adds up to what the client was sent.


@pytest.mark.parametrize("name", [*GEMINI_CASES, *DEEPSEEK_CASES])
def test_json_front_events_add_up_to_what_the_client_was_sent(cassettes: Path, name: str) -> None:
    cassette = only(cassettes, name)
    front = cassette["front"]
    recorded = Cassette.load(cassettes / f"{name}.json")
    assert front["api"] == ("Responses" if name.startswith("responses") else "Messages")
    assert front["matches_recorded"] is True and front["diff"] == []
    assert front["accounted"] is True and cassette["accounted"] is True
    # The client's request, as it sent it (credentials aside).
    assert recorded.client_request is not None
    assert front["request"]["body"] == json.loads(recorded.client_request.body)
    assert front["request"]["path"] == f"/v1/{name.split('-')[0]}"
    assert not {"authorization", "x-api-key"} & set(front["request"]["headers"])
    # Start, each event's front events, end: the events the client got (heartbeats aside).
    shown = front["start"] + [e for event in cassette["events"] for e in event["front"]]
    shown += front["end"]
    comparable = without_pings if front["api"] == "Messages" else without_keepalives
    if front["streamed"] and cassette["mode"] == "stream":
        assert shown == recorded_events(comparable(recorded.client_body))
    else:
        assert shown == [] and front["answer"] == [json.loads(recorded.client_body)]
    # Every kind is accounted for: on an event, a body, a note, or the front's own labels.
    places = labels_of(cassette) + cassette["notes"] + front["labels"] + front["notes"]
    for body in (cassette["request"], cassette["response"]):
        places += body["labels"] if body else []
    attributed: dict[str, int] = {}
    for label in places:
        for kind, n in label["kinds"].items():
            attributed[kind] = attributed.get(kind, 0) + n
    assert attributed == cassette["totals"]


def test_a_chat_cassette_has_no_front(cassettes: Path) -> None:
    from tests.explain.test_explain import GEMINI_STOP

    [cassette] = document(str(GEMINI_STOP))["cassettes"]
    assert cassette["front"] is None
    assert all("front" not in event for event in cassette["events"])


# Older cassettes, and a client copy today's proxy would not send.


def test_a_cassette_without_the_clients_request_explains_its_chat_side(
    cassettes: Path, tmp_path: Path
) -> None:
    """A front's cassette recorded before the client's request was kept cannot go through its
    door: its chat request is explained as a chat client's, and the front side says why it
    was not replayed; `streamfix replay` says the same of it."""
    for name in ("responses-stream", "messages-whole"):
        document_ = json.loads((cassettes / f"{name}.json").read_text())
        del document_["client_request"]  # as recorded before the field was kept
        (tmp_path / f"{name}.json").write_text(json.dumps(document_))
    out = explain(str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "front request (Responses, streamed to the client): not recorded" in out.stdout
    assert "front request (Messages, one body to the client): not recorded" in out.stdout
    assert "  chat      messages: system 1, user 1; tools: 2" in out.stdout
    assert out.stdout.count("front: not replayed: the cassette was recorded before") == 2
    assert re.search(FINISH_REWRITE, out.stdout)
    for cassette in document(str(tmp_path))["cassettes"]:
        front = cassette["front"]
        assert front["request"] is None and front["matches_recorded"] is None
        assert cassette["accounted"] is True  # the chat rows are what a chat client gets
    replayed = anyio.run(check_directory, tmp_path, Settings())
    assert [(r.ok, bool(r.unreplayable)) for r in replayed] == [(False, True)] * 2


def test_a_client_copy_that_differs_from_todays_rendering_is_said(
    cassettes: Path, tmp_path: Path
) -> None:
    """A recording made while the finish went out unrewritten: the client was told `end_turn`
    for a turn with a tool call. Explain says today's answer differs, as replay does."""
    path = tmp_path / "messages-stream.json"
    shutil.copy(cassettes / "messages-stream.json", path)
    old = Cassette.load(path)
    assert b'"stop_reason":"tool_use"' in old.client_body
    old.client_body = old.client_body.replace(
        b'"stop_reason":"tool_use"', b'"stop_reason":"end_turn"'
    )
    old.save(path)
    out = text_of(tmp_path, "messages-stream")
    assert "front request (Messages, POST /v1/messages, streamed" in out  # kept by a save
    assert "front: what the client was sent differs from today's answer (" in out
    assert re.search(r'^    -.*"stop_reason":"end_turn"', out, re.M)
    assert re.search(r'^    \+.*"stop_reason":"tool_use"', out, re.M)
    front = only(tmp_path, "messages-stream")["front"]
    assert front["matches_recorded"] is False
    replayed = anyio.run(check_cassette, path, Settings())
    assert front["diff"] == replayed.diff


def test_an_upstream_refusal_today_is_the_doors_error_said_as_a_difference(
    cassettes: Path, tmp_path: Path
) -> None:
    """A cassette whose upstream answer is an error today (the status edited to 500): the
    front's door answers with its own error shape, which explain shows as the front's answer
    and, like `streamfix replay`, as a difference from the response the client was sent."""
    document_ = json.loads((cassettes / "responses-whole.json").read_text())
    document_["upstream"]["status"] = 500
    path = tmp_path / "responses-whole.json"
    path.write_text(json.dumps(document_))
    out = text_of(tmp_path, "responses-whole")
    assert "== responses-whole.json (refused, 500)" in out
    assert "front request (Responses, POST /v1/responses, one body to the client):" in out
    assert "refused, in the door's own error shape: " in out
    [error] = front_lines(out[out.index("front answer") :])
    assert error["error"]["type"] == "server_error"
    assert "front: what the client was sent differs from today's answer (" in out
    front = only(tmp_path, "responses-whole")["front"]
    assert front["matches_recorded"] is False
    assert front["diff"] == anyio.run(check_cassette, path, Settings()).diff
