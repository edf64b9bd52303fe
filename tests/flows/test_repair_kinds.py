"""Every kind of change the proxy makes is visible where an operator looks: counted in
`streamfix_repairs_total{kind,route}`, listed in the exchange's log line, and on the response
(`x-streamfix-repairs`, and for a stream's own repairs the debug comment before `[DONE]`), on
the streamed and the non-streamed path. A scripted upstream answers each case with exactly the
shape that calls for its repair; the README's table of kinds is checked against the code."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.repair.profiles import PROFILES
from proxy.server.app import create_app
from proxy.server.logs import EXCHANGE
from proxy.settings.schema import Settings
from tests.support.servers import free_port, serve_in_thread
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
TWO_TOOLS = [*TOOLS, {"type": "function", "function": {"name": "get_time", "parameters": {}}}]
USER = [{"role": "user", "content": "weather in Paris?"}]
SIGNATURE = {"google": {"thought_signature": "sig-1"}}


# ── the scripted upstream ────────────────────────────────────────────────────


def chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
        **top,
    }


def call(arguments: str = '{"city": "Paris"}', **fields: Any) -> dict[str, Any]:
    """A complete tool-call delta entry; `fields` replace or (as None) remove its keys."""
    entry: dict[str, Any] = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    for key, value in fields.items():
        if key == "name":
            entry["function"].pop("name") if value is None else entry["function"].update(name=value)
        elif value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return entry


def sse(*chunks: dict[str, Any] | bytes, done: bool = True) -> bytes:
    events = [c if isinstance(c, bytes) else b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    return b"".join(events) + (b"data: [DONE]\n\n" if done else b"")


def message(tool_calls: list[dict[str, Any]] | None, finish: str | None = "tool_calls") -> dict:
    """A non-streamed completion whose message carries `tool_calls`."""
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {
        "id": "c-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
    }


@dataclass(frozen=True)
class Reply:
    stream: bytes = b""
    body: dict[str, Any] | None = None
    break_off: bool = False
    """Stop mid-stream without ending the response properly."""
    headers: dict[str, str] = field(default_factory=dict)


REPLIES: dict[str, Reply] = {}


def reply(name: str, stream: bytes = b"", body: dict | None = None, **options: Any) -> str:
    REPLIES[name] = Reply(stream, body, **options)
    return name


class ScriptedUpstream:
    """Answers `model = NAME` with REPLIES[NAME], streamed or not as the request asks."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        script = REPLIES[body["model"]]
        if not body.get("stream"):
            content = orjson.dumps(script.body)
            return Response(content, media_type="application/json", headers=script.headers)
        if script.break_off:
            return StreamingResponse(_broken(script.stream), media_type="text/event-stream")
        return Response(script.stream, media_type="text/event-stream", headers=script.headers)


async def _broken(data: bytes) -> Any:
    yield data
    raise RuntimeError("the upstream breaks off here")  # uvicorn drops the connection


# ── what an exchange shows ───────────────────────────────────────────────────


class Records(logging.Handler):
    """The proxy's log records, kept to find each exchange's one line."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def exchange(self, request_id: str) -> logging.LogRecord:
        """The exchange's line; a stream's is written when it closes, just after the client
        read its end, so it may take a moment."""

        def lines() -> list[logging.LogRecord]:
            return [
                r
                for r in self.records
                if (getattr(r, EXCHANGE, None) or {}).get("request_id") == request_id
            ]

        wait_until(lambda: bool(lines()), f"the log line of {request_id}")
        [line] = lines()
        return line


@dataclass
class Shown:
    """Where one exchange's repairs show."""

    header: dict[str, int]
    comment: dict[str, int] | None
    metric: float
    log: dict[str, int]
    log_line: str


@contextmanager
def proxy_stack(**config: Any) -> Iterator[tuple[str, Records]]:
    records = Records()
    app_logger = logging.getLogger("proxy.server.app")
    level = app_logger.level
    app_logger.addHandler(records)
    app_logger.setLevel(logging.INFO)
    try:
        with serve_in_thread(ScriptedUpstream().app) as upstream:
            values = {"upstream.base_url": f"{upstream}/v1", **config}
            with serve_in_thread(create_app(Settings().with_values(values))) as proxy:
                yield proxy, records
    finally:
        app_logger.removeHandler(records)
        app_logger.setLevel(level)


def metric(proxy: str, kind: str) -> float:
    text = httpx.get(f"{proxy}/metrics", timeout=10).text
    pattern = rf'^streamfix_repairs_total\{{kind="{kind}",route="default"\}} (\S+)$'
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else 0.0


def kinds_in(listing: str | None) -> dict[str, int]:
    if listing is None or listing == "none":
        return {}
    return {kind: int(n) for kind, _, n in (item.rpartition(":") for item in listing.split(","))}


def send(proxy: str, records: Records, body: dict[str, Any], credential: bool, kind: str) -> Shown:
    request_id = f"rq-{kind}-{len(records.records)}-{body.get('stream', False)}"
    headers = {"x-streamfix-debug": "1", "x-request-id": request_id}
    if credential:
        headers["authorization"] = "Bearer tenant-key"
    before = metric(proxy, kind)
    response = httpx.post(f"{proxy}/v1/chat/completions", json=body, headers=headers, timeout=30)
    comments = re.findall(rb"^: streamfix-repairs (.*)$", response.content, re.M)
    record = records.exchange(request_id)
    return Shown(
        header=kinds_in(response.headers["x-streamfix-repairs"]),
        comment=kinds_in(comments[-1].decode()) if comments else None,
        metric=metric(proxy, kind) - before,
        log=getattr(record, EXCHANGE)["repairs"],
        log_line=record.getMessage(),
    )


# ── the cases: one upstream shape (or request) per kind ─────────────────────


def answer(text: str = "It is sunny.") -> tuple[bytes, dict[str, Any]]:
    """A plain text answer, streamed and not: for kinds the request side decides."""
    body = message(None, finish="stop")
    body["choices"][0]["message"]["content"] = text
    stream = sse(chunk({"role": "assistant", "content": text}), chunk({}, "stop"))
    return stream, body


def called(**fields: Any) -> tuple[bytes, dict[str, Any]]:
    """One call, streamed in one delta and whole in a message, with `fields` changed."""
    whole = {k: v for k, v in fields.items() if k not in ("delta_extra",)}
    stream = sse(
        chunk({"role": "assistant", **fields.get("delta_extra", {})}),
        chunk({"tool_calls": [call(**whole)]}),
        chunk({}, "tool_calls"),
    )
    in_message = call(**{"index": None, **whole})
    body = message([in_message])
    body["choices"][0]["message"].update(fields.get("delta_extra", {}))
    return stream, body


ASSISTANT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
AGAIN = {"role": "user", "content": "and tomorrow?"}


def with_signature(signature: str) -> dict[str, Any]:
    turn = orjson.loads(orjson.dumps(ASSISTANT_CALL))
    turn["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": signature}}
    return turn


@dataclass(frozen=True)
class Case:
    kind: str
    replies: tuple[bytes, dict[str, Any] | None]
    paths: tuple[str, ...] = ("stream", "json")
    messages: tuple[dict[str, Any], ...] = tuple(USER)
    tools: tuple[dict[str, Any], ...] = tuple(TOOLS)
    config: tuple[tuple[str, Any], ...] = ()
    credential: bool = True
    prelude: bool = False
    """First one exchange answered with `called(extra_content=SIGNATURE)` (or the DeepSeek
    reasoning turn), whose receipt the case's request needs."""
    request_side: bool = False
    """Decided on the request: in `x-streamfix-repairs` on both paths."""
    on_response: bool = True
    """False: the stream ends in an error, so no debug comment; metric and log only."""


DEEPSEEK = (("upstream.profile", "deepseek"),)
FRAGMENTED = sse(
    chunk({"role": "assistant", "tool_calls": [call('{"city": ')]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({}, "tool_calls"),
)
MOVED = {"arguments": '"P"}'}  # the rest of call_1's arguments, under a new index
LEAKED = [call('{"city": "Par'), call('is"}{"city": "Tokyo"}', index=1, id="call_2")]
TEXT = chunk({"role": "assistant", "content": "hi"})

CASES = [
    Case("tool_call_index_added", called(index=None), ("stream",)),
    Case("tool_call_index_renumbered", called(index=1), ("stream",)),
    Case(
        "tool_call_index_change_merged",
        (
            sse(
                chunk({"role": "assistant", "tool_calls": [call('{"city": ')]}),
                chunk(
                    {
                        "tool_calls": [
                            {"index": 1, "id": "call_1", "function": {"arguments": '"P"}'}}
                        ]
                    }
                ),
                chunk({}, "tool_calls"),
            ),
            None,
        ),
        ("stream",),
    ),
    Case("tool_call_id_generated", called(id=None)),
    Case("tool_call_type_added", called(type=None)),
    Case("tool_call_name_inferred", called(name=None)),
    Case(
        "tool_call_fragments_assembled",
        (FRAGMENTED, None),
        ("stream",),
        config=(("tool_calls.emit", "atomic"),),  # auto relays an OpenAI-shaped call as it came
    ),
    Case(
        "arguments_leak",
        (
            sse(chunk({"role": "assistant", "tool_calls": LEAKED}), chunk({}, "tool_calls")),
            message([call(c["function"]["arguments"], index=None, id=c["id"]) for c in LEAKED]),
        ),
    ),
    Case("arguments_empty", called(arguments="")),
    Case(
        "content_blocks_flattened",
        (
            sse(
                chunk({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}),
                chunk({}, "stop"),
            ),
            None,
        ),
        ("stream",),
    ),
    Case("tool_call_without_name", called(name=None), tools=tuple(TWO_TOOLS)),
    Case(
        "orphan_extra_content",
        (
            sse(
                chunk({"role": "assistant", "tool_calls": [{"extra_content": SIGNATURE}]}),
                chunk({}, "stop"),
            ),
            None,
        ),
        ("stream",),
    ),
    Case(
        "arguments_unparseable",
        (sse(TEXT, chunk({"tool_calls": [call('{"city": "Par')]}), chunk({}, "tool_calls")), None),
        ("stream",),
    ),
    Case("call_id_reused", called(), messages=(*USER, ASSISTANT_CALL, RESULT, AGAIN)),
    Case(
        "finish_reason_rewritten",
        (
            sse(chunk({"role": "assistant", "tool_calls": [call()]}), chunk({}, "stop")),
            message([call(index=None)], finish="stop"),
        ),
    ),
    Case(
        "finish_reason_added",
        (
            sse(chunk({"role": "assistant", "tool_calls": [call()]})),
            message([call(index=None)], finish=None),
        ),
    ),
    Case(
        "finish_reason_repeated_dropped",
        (sse(TEXT, chunk({}, "stop"), chunk({}, "stop")), None),
        ("stream",),
    ),
    Case(
        "after_finish_delta_emptied",
        (sse(TEXT, chunk({}, "stop"), chunk({"role": "assistant", "content": ""})), None),
        ("stream",),
    ),
    Case("role_added", (sse(chunk({"content": "hi"}), chunk({}, "stop")), None), ("stream",)),
    Case(
        "role_repeated_dropped",
        (sse(TEXT, chunk({"role": "assistant", "content": "!"}), chunk({}, "stop")), None),
        ("stream",),
    ),
    Case(
        "empty_event_dropped",
        (sse(TEXT, chunk({"role": "assistant"}), chunk({}, "stop")), None),
        ("stream",),
    ),
    Case("done_added", (sse(TEXT, chunk({}, "stop"), done=False), None), ("stream",)),
    Case(
        "events_split",
        (
            b"data: "
            + orjson.dumps(TEXT)
            + b"\ndata: "
            + orjson.dumps(chunk({}, "stop"))
            + b"\n\ndata: [DONE]\n\n",
            None,
        ),
        ("stream",),
    ),
    Case(
        "upstream_error_event",
        (sse(TEXT, {"error": {"message": "overloaded", "code": 529}}, done=False), None),
        ("stream",),
        on_response=False,
    ),
    Case("history_orphan_result_dropped", answer(), messages=(*USER, RESULT), request_side=True),
    Case(
        "history_duplicate_result_dropped",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT, RESULT, AGAIN),
        request_side=True,
    ),
    Case(
        "history_missing_result_added",
        answer(),
        messages=(*USER, ASSISTANT_CALL, AGAIN),
        request_side=True,
    ),
    Case(
        "history_duplicate_id_renamed",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT, ASSISTANT_CALL, RESULT, AGAIN),
        request_side=True,
    ),
    Case("signatures_captured", called(extra_content=SIGNATURE)),
    Case(
        "signatures_injected",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT, AGAIN),
        prelude=True,
        request_side=True,
    ),
    Case(
        "signatures_restored",
        answer(),
        messages=(*USER, with_signature("altered"), RESULT, AGAIN),
        prelude=True,
        request_side=True,
    ),
    Case(
        "signatures_placeholders",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT),
        config=(("upstream.profile", "gemini"),),
        request_side=True,
    ),
    Case(
        "reasoning_content_captured",
        called(delta_extra={"reasoning_content": "Paris first."}),
        config=DEEPSEEK,
    ),
    Case(
        "reasoning_content_missing",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT),
        config=DEEPSEEK,
        request_side=True,
    ),
    Case(
        "reasoning_details_captured",
        called(delta_extra={"reasoning_details": [{"type": "reasoning.text", "text": "t"}]}),
    ),
    Case(
        "foreign_metadata_removed",
        answer(),
        messages=(*USER, with_signature("from-google"), RESULT),
        config=DEEPSEEK,
        request_side=True,
    ),
    Case("receipts_skipped_no_credential", answer(), credential=False, request_side=True),
    Case("reasoning_from_text", answer("<think>Paris first.</think>\n\nIt is sunny.")),
    Case("reasoning_close_unopened", answer("Paris first.\n</think>\n\nIt is sunny.")),
    Case(
        "receipt_too_large",
        called(extra_content=SIGNATURE),
        config=(("receipts.max_value_bytes", 8),),
    ),
]


def written(text: str, finish: str = "stop") -> tuple[bytes, dict[str, Any]]:
    """An answer whose content is `text` (tool-call markup, for the recogniser's kinds), the
    stream cutting it into 9-character pieces."""
    stream, body = answer(text)
    pieces = [text[i : i + 9] for i in range(0, len(text), 9)]
    stream = sse(*(chunk({"content": piece}) for piece in pieces), chunk({}, finish))
    body["choices"][0]["finish_reason"] = finish
    return stream, body


def hermes(name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


CITY_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
BROKEN_SCHEMA = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": 7}}}
CASES += [
    Case("text_tool_call", written("Checking. " + hermes())),
    Case("text_tool_call_undeclared", written(hermes("drop_tables"))),
    Case(
        "text_tool_call_invalid_arguments",
        written(hermes(arguments='{"city": 75}')),
        tools=(CITY_TOOL,),
    ),
    Case("text_tool_call_schema_unusable", written(hermes()), tools=(BROKEN_SCHEMA,)),
    Case("text_tool_call_unparsed", written(hermes(arguments='{"city": }'))),
    Case("text_tool_call_in_code", written(f"For example:\n```\n{hermes()}\n```\n")),
    Case("text_tool_call_unclosed", written(hermes()[:-14])),
    Case("text_tool_call_truncated", written(hermes()[:-14], finish="length")),
    Case("arguments_object_stringified", called(arguments={"city": "Paris"})),
    Case(
        "arguments_decoded_twice",
        called(arguments=orjson.dumps('{"city": "Paris"}').decode()),
        tools=(CITY_TOOL,),
    ),
    Case(
        "text_tool_call_too_long",
        written(hermes(arguments='{"city": "' + "P" * 200 + '"}')[:-14]),
        config=(("tool_calls.max_buffered_bytes", 100),),
    ),
]

STRICT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "additionalProperties": False,
        },
    },
}
UNTYPED_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"properties": {"city": {}}}},
}
GEMINI = (("upstream.profile", "gemini"),)
CASES += [
    Case(
        "schema_keyword_removed", answer(), tools=(STRICT_TOOL,), config=GEMINI, request_side=True
    ),
    Case(
        "schema_keyword_moved_to_description",
        answer(),
        tools=(STRICT_TOOL,),
        config=GEMINI,
        request_side=True,
    ),
    Case(
        "schema_type_added",
        answer(),
        tools=(UNTYPED_TOOL,),
        config=(("upstream.schema_dialect", "moonshot"),),
        request_side=True,
    ),
]

MISTRAL = (("upstream.profile", "mistral"),)
CASES += [
    Case(
        "role_developer_to_system",
        answer(),
        messages=({"role": "developer", "content": "Be brief."}, *USER),
        config=DEEPSEEK,
        request_side=True,
    ),
    Case(
        "system_messages_merged",
        answer(),
        messages=(*USER, {"role": "system", "content": "Answer in French."}),
        config=(("upstream.system_messages", "merged"),),
        request_side=True,
    ),
    Case(
        "assistant_content_normalised",
        answer(),
        messages=(*USER, {**ASSISTANT_CALL, "content": ""}, RESULT, AGAIN),
        config=(("upstream.assistant_tool_content", "null"),),
        request_side=True,
    ),
    Case(
        "tool_content_flattened",
        answer(),
        messages=(
            *USER,
            ASSISTANT_CALL,
            {**RESULT, "content": [{"type": "text", "text": "sunny"}]},
        ),
        config=(("upstream.tool_content", "string"),),
        request_side=True,
    ),
    Case(
        "tool_call_id_mapped",
        answer(),
        messages=(*USER, ASSISTANT_CALL, RESULT, AGAIN),
        config=MISTRAL,
        request_side=True,
    ),
]
DOTTED_TOOL = {
    "type": "function",
    "function": {"name": "files.read", "parameters": {"type": "object", "properties": {}}},
}
OPENAI_NAMES = (("upstream.tool_names", "openai"),)
CASES += [
    Case(
        "tool_name_renamed",
        answer(),
        tools=(DOTTED_TOOL,),
        config=OPENAI_NAMES,
        request_side=True,
    ),
    # The upstream was sent `files_read` and calls it so: the client gets `files.read`.
    Case(
        "tool_name_restored",
        called(function={"name": "files_read", "arguments": "{}"}),
        tools=(DOTTED_TOOL,),
        config=OPENAI_NAMES,
    ),
]

NOBODY_LISTENS = free_port()
CASES += [
    Case("unrepaired_encoding", answer(), request_side=True, on_response=False),
    Case("stream_aborted", (sse(TEXT, done=False), None), ("stream",), on_response=False),
    Case(
        "receipts_not_stored",
        called(extra_content=SIGNATURE),
        config=(("receipts.store", f"redis://127.0.0.1:{NOBODY_LISTENS}/0"),),
    ),
]
# Relayed as received: an encoding the proxy does not decode (the bytes are plain, the header
# is what counts), and a stream the upstream breaks off.
reply("unrepaired_encoding", *answer(), headers={"content-encoding": "br"})
reply("stream_aborted", sse(TEXT, done=False), break_off=True)

COVERED_ELSEWHERE = {
    # The Responses front's kinds: its translator's tests count them (tests/fronts/responses).
    "responses_custom_tool": "test_tools_function_custom_namespace_and_hosted",
    "responses_namespace_tool": "test_tools_function_custom_namespace_and_hosted",
    "responses_hosted_tool_dropped": "test_tools_function_custom_namespace_and_hosted",
    "responses_developer_role": "test_messages_with_and_without_type_and_parts",
    "responses_previous_response": "test_a_continuation_is_the_stored_transcript_then_the_new",
    "responses_item_reference": "test_an_item_reference_resolves_from_the_store_and_an_unknown",
    "responses_foreign_receipt_token": "test_a_tampered_or_foreign_token_is_dropped_and_counted",
    "responses_receipt_token_unknown": "test_a_valid_token_whose_turn_is_gone_is_counted",
    "responses_receipts_restored": "test_a_reasoning_token_restores_the_turns_receipts",
    "responses_store_failed": "test_a_failed_store_write_is_counted_and_the_answer_still",
    "responses_compaction_summarised": "test_the_compaction_and_its_restoring_are_counted",
    "responses_compaction_restored": "test_the_compaction_and_its_restoring_are_counted",
    # The Messages front's kinds: its request and events translators (tests/fronts/) and a
    # real Anthropic SDK through the proxy.
    "thinking_signature_dropped": "test_a_tampered_signature_is_dropped_and_counted",
    "thinking_dropped": "test_thinking_budget_becomes_an_effort",
    "anthropic_beta_unknown": "test_betas_by_table",
    "messages_field_ignored": "test_golden_a_claude_code_request",
    "tool_call_without_name_dropped": "test_a_call_without_a_name_or_with_arguments_that_are",
    "tool_input_not_an_object": "test_a_call_without_a_name_or_with_arguments_that_are",
    "messages_receipts_restored": "test_a_turn_the_store_cannot_name_gets_its_receipts_back",
    "messages_receipt_token_unknown": "test_a_signature_whose_turn_is_gone_is_counted",
    "messages_store_failed": "test_a_failed_turn_write_is_counted_and_the_answer_still",
    "messages_tool_use_id_encoded": "test_kimis_ids_reach_the_client_in_anthropics_alphabet",
    "messages_tool_use_id_restored": "test_the_history_goes_upstream_with_the_upstreams_own_ids",
    "messages_input_tokens_estimated": "test_without_a_reported_prompt_the_estimate_stands",
    "stream_folded": "test_a_responses_client_asking_for_one_answer_gets_the_folded_stream",
    # Google's array-wrapped refusal, through the chat door beside the bodies relayed as sent.
    "error_body_unwrapped": "test_a_chat_client_gets_the_upstreams_refusal_as_sent_but_for",
    # The parameter kinds need an upstream that refuses a parameter with its real error body
    # (tests/support/rejecting_upstream.py), and two requests for the one learned.
    "parameter_dropped": "test_each_table_rule_meets_an_upstream_that_refuses_exactly_that",
    "parameter_renamed": "test_mistral_keeps_the_clients_own_max_tokens_over_the_renamed_one",
    "parameter_learned": "test_the_learned_drop_is_counted_and_logged_once_with_the_request_id",
    # A JSON schema format downgraded needs the upstream's refusal first (the DeepSeek fake).
    "response_format_downgraded": "test_deepseek_refuses_the_schema_once_and_json_mode_goes_from",
    # A completion budget lowered needs the upstream's refusal first (tests/support/
    # limit_upstreams.py), and two requests for the one remembered.
    "max_tokens_limit_learned": "test_the_models_limit_is_learned_after_one_resend_and_applied",
    "max_tokens_clamped": "test_the_models_limit_is_learned_after_one_resend_and_applied",
    "max_tokens_fitted": "test_the_contexts_room_is_fitted_to_each_prompt_and_never_remembered",
    # A forced tool choice changed needs a thinking upstream's refusal first.
    "tool_choice_unforced": "test_the_refusal_is_learned_after_one_resend_and_applied_up_front",
    "thinking_dropped_for_tool_choice": (
        "test_the_refusal_is_learned_after_one_resend_and_applied_up_front"
    ),
    # Marks and PDFs need the Messages front and an upstream refusing them with its real body
    # first (tests/support/part_upstreams.py).
    "cache_control_dropped": "test_an_upstream_refusing_marks_gets_them_dropped_once_and_from",
    "cache_control_ttl_dropped": "test_an_upstream_refusing_only_the_ttl_keeps_the_breakpoints",
    "file_parts_learned": "test_an_upstream_that_refuses_file_parts_is_answered_clearly_and",
    "file_parts_refused": "test_an_upstream_that_refuses_file_parts_is_answered_clearly_and",
    # A reused connection the upstream closed under the request needs a scripted socket.
    "upstream_retried": "test_a_get_retried_by_the_transport_is_counted_and_logged",
    # A 429 waited out needs an upstream that answers 429 first, then the answer.
    "rate_limit_resent": "test_the_resend_is_counted_on_the_answer",
    # A door's own query parameter needs the door's client's URL (Claude Code's `?beta=true`).
    "door_query_parameter_dropped": "test_claude_codes_beta_query_stays_at_the_messages_door",
    # The schema kinds all come from one rewrite through one count: three run through the
    # proxy below, the rest are pinned on the rewrite itself (tests/repair/dialects).
    "schema_ref_inlined": "test_a_local_ref_is_inlined_and_the_definitions_go",
    "schema_ref_unresolved": "test_a_reference_that_cannot_be_resolved_says_where_it_pointed",
    "schema_recursion_cut": "test_recursion_stops_at_the_bound_with_a_typed_node_that_says_so",
    "schema_type_array_rewritten": "test_a_type_with_null_becomes_the_type_nullable",
    "schema_tuple_rewritten": "test_a_tuple_becomes_one_items_schema_with_its_order_described",
    "schema_null_to_nullable": "test_a_null_branch_of_any_of_becomes_nullable",
    "schema_const_to_enum": "test_a_string_const_becomes_a_one_value_enum",
    "schema_one_of_to_any_of": "test_one_of_becomes_any_of",
    "schema_all_of_merged": "test_all_of_is_merged_into_its_node",
    "schema_type_moved_into_any_of": (
        "test_moonshot_the_type_beside_any_of_moves_into_the_branches"
    ),
    "schema_type_unknown": "test_moonshot_a_node_nothing_types_is_left_and_counted",
}
for case in CASES:
    if case.replies[0] and case.kind not in REPLIES:
        reply(case.kind, case.replies[0], case.replies[1])
reply("signature_prelude", *called(extra_content=SIGNATURE))


@pytest.mark.parametrize(
    ("case", "path"),
    [(case, path) for case in CASES for path in case.paths],
    ids=lambda value: value.kind if isinstance(value, Case) else value,
)
def test_every_kind_is_counted_logged_and_shown(case: Case, path: str) -> None:
    stream = path == "stream"
    with proxy_stack(**dict(case.config)) as (proxy, records):
        if case.prelude:
            body = {"model": "signature_prelude", "messages": USER, "tools": TOOLS}
            prelude = send(proxy, records, {**body, "stream": stream}, True, "prelude")
            assert prelude.log.get("signatures_captured") == 1, prelude.log_line
        body = {
            "model": case.kind,
            "messages": list(case.messages),
            "tools": list(case.tools),
            "stream": stream,
        }
        shown = send(proxy, records, body, case.credential, case.kind)
    assert shown.metric >= 1, shown
    assert shown.log.get(case.kind, 0) >= 1 and f"{case.kind}:" in shown.log_line, shown
    if case.request_side or not stream:
        assert shown.header.get(case.kind, 0) >= 1, shown
    if stream and case.on_response:
        assert shown.comment is not None and shown.comment.get(case.kind, 0) >= 1, shown
    if stream and not case.request_side:
        # The head went out before the stream's own repairs happened.
        assert case.kind not in shown.header, shown
    if case.kind == "receipts_not_stored":
        assert "signatures_captured" not in shown.log, shown  # a failed write is no capture


# ── the table ────────────────────────────────────────────────────────────────

RECEIPT_KINDS = sorted({rule.kind for profile in PROFILES.values() for rule in profile.receipts})
RECEIPT_EVENTS = ("captured", "injected", "restored", "missing")


def kinds_in_code() -> set[str]:
    """Every kind the proxy's code can count: literal names, and the receipt events for every
    receipt kind the profiles know (`{kind}_captured` and the like)."""
    literal = re.compile(r'(?:count|note|_change)\(\s*"([a-z_]+)"')
    conditional = re.compile(r'count\(\s*"([a-z_]+)" if [^\n]+ else "([a-z_]+)"')
    constant = re.compile(r'^[A-Z_]+_KIND = "([a-z_]+)"', re.M)  # kinds a function returns
    kinds: set[str] = set()
    for path in (ROOT / "proxy").rglob("*.py"):
        text = path.read_text()
        kinds |= set(literal.findall(text)) | set(constant.findall(text))
        for pair in conditional.findall(text):
            kinds |= set(pair)
    kinds |= {f"{kind}_{event}" for kind in RECEIPT_KINDS for event in RECEIPT_EVENTS}
    kinds |= {
        f"{p.first_call_placeholder.kind}_placeholders"
        for p in PROFILES.values()
        if p.first_call_placeholder
    }
    return kinds


def kinds_in_readme() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("### Every change, by kind") :]
    table = table[: table.index("\n## ")]
    names = set(re.findall(r"^\| `([a-z_<>]+)` \|", table, re.M))
    expanded = {n for n in names if "<receipt>" not in n}
    for name in names - expanded:
        expanded |= {name.replace("<receipt>", kind) for kind in RECEIPT_KINDS}
    return expanded


def test_the_readme_table_lists_every_kind_the_code_counts() -> None:
    in_code = kinds_in_code()
    assert "finish_reason_rewritten" in in_code and "signatures_captured" in in_code
    assert in_code - kinds_in_readme() == set()


def test_every_kind_has_a_case_here_or_a_named_test() -> None:
    tested = {case.kind for case in CASES} | set(COVERED_ELSEWHERE)
    # The receipt events that only some kinds have in practice are tested for one kind each:
    # the code path is the same, with the kind from the profile's data.
    sampled = {f"{kind}_{event}" for kind in RECEIPT_KINDS for event in RECEIPT_EVENTS}
    assert kinds_in_code() - tested - sampled == set()
    for kind in ("captured", "injected", "restored", "missing"):
        assert any(case.kind.endswith(f"_{kind}") for case in CASES), kind
    for test_name in COVERED_ELSEWHERE.values():
        assert any(test_name in path.read_text() for path in (ROOT / "tests").rglob("test_*.py"))
