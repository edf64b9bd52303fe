"""Every response of a corpus of recorded upstream traffic, read by real clients, direct and
through the proxy (issue 14, item 7).

    python3 bench/corpus.py CORPUS_DIR [--only SUBSTRING] [--no-vercel] [--no-direct]
                           [--emit atomic|incremental]

CORPUS_DIR holds response bodies (`*.txt`, `*.sse`, `*.json`, in `raw/` or at the top),
optionally their request bodies (`STEM.request.json`, `STEM.turnN.request.json`) and a
`manifest.json` giving each file's recorded HTTP status and content type (the layout of
../shared/realworld/; a user's own captures need only the bodies). A body is served the way
it was recorded:

- raw SSE (any line starting `data:`, `event:` or `:`): the bytes unchanged, one event a write;
- bare chunk lines (one JSON chunk a line, the Vercel AI SDK's fixture format): each line as
  `data: LINE` plus a blank line, then `data: [DONE]`; a file holding two responses (the chunk
  `id` changes after a finish) is served as two streams, rows `FILE#1`, `FILE#2`;
- a JSON body: with its recorded status and content type (a JSON error without a recorded
  status gets the status its `error.code` names).

Each response is one row; the columns are the clients, each run against a fake upstream that
serves the body (direct) and against the proxy in front of that fake (proxy):

    wire      the bytes the client got: proxy.repair.conformance's rules (one [DONE], last; one
              finish per choice; calls opened with index/id/type/name, indexes from 0; each
              call in one delta for the atomic proxy), for SSE only; direct, the rules of a
              proper incremental stream
    stream    OpenAI Python SDK, `client.chat.completions.stream()`
    create    OpenAI Python SDK, `create(stream=True)` accumulated by `index` (the usual loop);
              for a non-streamed body, `create()` and the message
    ai v1-v3  Vercel AI SDK `@ai-sdk/openai-compatible` 1.x/2.x/3.x `streamText` (through
              tests/clients/vercel_driver.mjs; `npm ci` in tests/clients if needed)
    request   (proxy only) each recorded `turnN.request.json` sent in order with one key: the
              body the fake receives must be JSON-equal to the one sent
    follow-up (proxy only) each recorded answer taken by the OpenAI SDK through the proxy and
              sent back in the client's own next request (the recorded `turnN+1` request with
              the SDK's message in place of the recorded one, tool results mapped to its call
              ids), once as the SDK gave it and once without its receipts: the fake must get
              every receipt it issued (signatures on calls and messages, reasoning_details, a
              tool turn's reasoning_content); exact for JSON answers, present for streamed ones

A cell is PASS or what differs from what the upstream meant: the calls (names, parsed
arguments) assembled tolerantly from the recorded chunks, the text, one finish reason
(`tool_calls` when calls were sent, the upstream's own otherwise, `stop` when it sent none),
`role` "assistant"; for an error (status >= 400, `event: error`, a top-level `error` chunk), that
the client reports an error. Not part of the test suite: the corpus is not in the repository.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import openai  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from proxy.repair.calls.declared import DeclaredTools  # noqa: E402
from proxy.repair.conformance import violations  # noqa: E402
from proxy.server.app import create_app  # noqa: E402
from proxy.settings.schema import Settings  # noqa: E402
from proxy.wire.sse import DONE, SSEDecoder  # noqa: E402
from tests.clients.vercel import SDK_VERSIONS, run_vercel  # noqa: E402
from tests.support.fake_upstream import split_events  # noqa: E402
from tests.support.servers import serve_in_thread  # noqa: E402

TURN = re.compile(r"^(?P<stem>.+)\.turn(?P<n>\d+)$")
CLIENTS = ("wire", "stream", "create", *(f"ai {sdk}" for sdk in sorted(SDK_VERSIONS)))


# ── the corpus ───────────────────────────────────────────────────────────────


@dataclass
class Recorded:
    """One response as the fake serves it."""

    row: str
    kind: str  # "sse" or "json"
    status: int = 200
    content_type: str = "text/event-stream"
    pieces: list[bytes] = field(default_factory=list)  # sse: one write each
    body: bytes = b""  # json
    request: dict[str, Any] | None = None  # the recorded request of this response, if any

    @property
    def sse(self) -> bytes:
        return b"".join(self.pieces)


@dataclass
class Conversation:
    """A multi-turn entry: its requests and responses, in recorded order."""

    stem: str
    turns: list[tuple[dict[str, Any], Recorded]]


def manifest_of(corpus: Path) -> dict[str, dict[str, Any]]:
    path = corpus / "manifest.json"
    if not path.exists():
        return {}
    files: dict[str, dict[str, Any]] = {}
    for entry in json.loads(path.read_text()):
        for item in entry.get("files", []):
            files[Path(item["file"]).name] = item
    return files


def response_files(corpus: Path) -> list[Path]:
    folder = corpus / "raw" if (corpus / "raw").is_dir() else corpus
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and p.suffix in (".txt", ".sse", ".json")
        and not p.name.endswith(".request.json")
        and p.name != "manifest.json"
    )


def request_of(path: Path) -> dict[str, Any] | None:
    request = path.with_name(path.stem + ".request.json")
    return json.loads(request.read_text()) if request.exists() else None


def is_sse(text: str) -> bool:
    return any(line.startswith(("data:", "event:", ":")) for line in text.splitlines())


def chunk_lines(text: str) -> list[dict[str, Any]] | None:
    """The chunks of a bare chunk-lines file, or None when it is not one."""
    chunks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, dict) or "choices" not in value:
            return None
        chunks.append(value)
    return chunks or None


def split_responses(chunks: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Two responses in one file: a new chunk id after a finish starts the second."""
    parts: list[list[dict[str, Any]]] = [[]]
    finished = False
    for chunk in chunks:
        if finished and parts[-1] and chunk.get("id") != parts[-1][-1].get("id"):
            parts.append([])
            finished = False
        parts[-1].append(chunk)
        finished |= any(c.get("finish_reason") for c in chunk.get("choices") or ())
    return parts


def load(path: Path, manifest: dict[str, dict[str, Any]]) -> list[Recorded]:
    text = path.read_text()
    request = request_of(path)
    if is_sse(text):
        return [Recorded(path.stem, "sse", pieces=split_events(path.read_bytes()), request=request)]
    chunks = chunk_lines(text)
    if chunks is not None:
        parts = split_responses(chunks)
        return [
            Recorded(
                path.stem if len(parts) == 1 else f"{path.stem}#{n}",
                "sse",
                pieces=[b"data: " + json.dumps(c).encode() + b"\n\n" for c in part]
                + [b"data: [DONE]\n\n"],
                request=request,
            )
            for n, part in enumerate(parts, 1)
        ]
    recorded = manifest.get(path.name, {})
    content_type = recorded.get("content_type") or ["application/json"]
    status = recorded.get("status") or error_code(text) or 200
    return [
        Recorded(
            path.stem,
            "json",
            status=status,
            content_type=content_type[0] if isinstance(content_type, list) else content_type,
            body=path.read_bytes(),
            request=request,
        )
    ]


def error_code(text: str) -> int | None:
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return None
    body = body[0] if isinstance(body, list) and body else body
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else None


def conversations(paths: list[Path], responses: dict[str, Recorded]) -> list[Conversation]:
    turns: dict[str, list[tuple[int, dict[str, Any], Recorded]]] = {}
    for path in paths:
        match = TURN.match(path.stem)
        if match and path.stem in responses and responses[path.stem].request is not None:
            response = responses[path.stem]
            assert response.request is not None
            turns.setdefault(match["stem"], []).append(
                (int(match["n"]), response.request, response)
            )
    return [
        Conversation(stem, [(req, resp) for _, req, resp in sorted(found, key=lambda t: t[0])])
        for stem, found in sorted(turns.items())
        if len(found) > 1
    ]


# ── what the upstream meant ──────────────────────────────────────────────────


@dataclass
class Meant:
    text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"} (parsed)
    finish: str | None = None
    error: str | None = None
    status: int = 200


def parse_args(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return f"<not JSON: {text!r}>"


def sse_chunks(body: bytes) -> tuple[list[dict[str, Any]], str | None]:
    """Tolerantly: every JSON `data:` line (whatever the event framing), and any error."""
    chunks, error, event = [], None, None
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
            continue
        if not line.startswith("data:"):
            if not line.strip():
                event = None
            continue
        try:
            value = json.loads(line[5:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and (event == "error" or "error" in value):
            error = json.dumps(value.get("error", value))[:80]
        elif isinstance(value, dict):
            chunks.append(value)
    return chunks, error


class TolerantCalls:
    """Calls assembled the forgiving way: by id when one is known, by index when given, a name
    on an entry opens a call once the latest is complete, anything else continues the latest."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.by_index: dict[int, dict[str, Any]] = {}

    def add(self, entries: list[Any]) -> None:
        for entry in entries:
            if isinstance(entry, dict):
                self._merge(self._match(entry), entry)

    def _match(self, entry: dict[str, Any]) -> dict[str, Any]:
        call_id, index = entry.get("id") or None, entry.get("index")
        name = (entry.get("function") or {}).get("name") or None
        if call_id in self.by_id:
            return self.by_id[call_id]
        latest = self.calls[-1] if self.calls else None
        if index in self.by_index and not (call_id and self.by_index[index]["id"]):
            return self.by_index[index]
        if latest is None or name or (call_id and latest["id"] != call_id):
            call = {"id": call_id, "name": None, "arguments": ""}
            self.calls.append(call)
            if call_id:
                self.by_id[call_id] = call
            if isinstance(index, int):
                self.by_index[index] = call
            return call
        return latest

    @staticmethod
    def _merge(call: dict[str, Any], entry: dict[str, Any]) -> None:
        function = entry.get("function") or {}
        call["name"] = call["name"] or function.get("name") or None
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        call["arguments"] += arguments or ""

    def result(self) -> list[dict[str, Any]]:
        return [{"name": c["name"], "arguments": parse_args(c["arguments"])} for c in self.calls]


def meant(response: Recorded) -> Meant:
    if response.kind == "json":
        return meant_json(response)
    chunks, error = sse_chunks(response.sse)
    out, calls = Meant(error=error), TolerantCalls()
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                out.text += delta["content"]
            if isinstance(delta.get("tool_calls"), list):
                calls.add(delta["tool_calls"])
            out.finish = choice.get("finish_reason") or out.finish
    out.calls = as_declared(response.request, calls.result())
    out.finish = "tool_calls" if out.calls else (out.finish or "stop")
    return out


def as_declared(request: dict[str, Any] | None, calls: list[dict[str, Any]]) -> list[dict]:
    """What the calls mean under the request's tool schemas: arguments the upstream encoded
    once too often (a list sent as its JSON text where the schema wants the list) read as the
    schema says, the one reading the proxy's ToolCallRepair applies too."""
    tools = DeclaredTools.of(request or {})
    if tools is None:
        return calls
    meant = []
    for call in calls:
        arguments = call["arguments"]
        if isinstance(call["name"], str) and not isinstance(arguments, str):
            reshaped = tools.reshaped(call["name"], json.dumps(arguments))
            arguments = json.loads(reshaped) if reshaped is not None else arguments
        meant.append({**call, "arguments": arguments})
    return meant


def meant_json(response: Recorded) -> Meant:
    body = json.loads(response.body)
    if response.status >= 400:
        return Meant(error=response.body.decode()[:80], status=response.status)
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = [
        {"name": c["function"].get("name"), "arguments": parse_args(c["function"].get("arguments"))}
        for c in message.get("tool_calls") or []
    ]
    calls = as_declared(response.request, calls)
    finish = "tool_calls" if calls else (choice.get("finish_reason") or "stop")
    return Meant(text=message.get("content") or "", calls=calls, finish=finish)


# ── the fake upstream ────────────────────────────────────────────────────────


class Fake:
    """Serves the response registered under the request's API key (so clients run in parallel);
    keeps the last request body each key sent."""

    def __init__(self) -> None:
        self.responses: dict[str, Recorded] = {}
        self.received: dict[str, Any] = {}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Any:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        raw = await request.body()
        self.received[key] = json.loads(raw) if raw else None
        response = self.responses.get(key)
        if response is None:
            return Response(b'{"error":{"message":"no response for this key"}}', 404)
        if response.kind == "json":
            return Response(response.body, response.status, media_type=response.content_type)
        return _Stream(response.pieces)


class _Stream:
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for piece in self.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


# ── the clients ──────────────────────────────────────────────────────────────


def tools_for(response: Recorded, want: Meant) -> list[dict[str, Any]]:
    """The recorded request's tools; without one, a permissive tool per meant call."""
    request = response.request or {}
    if request.get("tools"):
        return request["tools"]
    names = sorted({c["name"] for c in want.calls if c["name"]})
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names
    ]


def model_of(response: Recorded) -> str:
    request = response.request or {}
    return request.get("model") or response.row.split("__")[0]


def openai_client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


def got_stream(base_url: str, key: str, response: Recorded, want: Meant) -> dict[str, Any]:
    kwargs = {"tools": tools_for(response, want)} if tools_for(response, want) else {}
    with openai_client(base_url, key).chat.completions.stream(
        model=model_of(response), messages=[{"role": "user", "content": "go"}], **kwargs
    ) as stream:
        for _ in stream:
            pass
        try:
            completion = stream.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            completion = (
                exc.completion
            )  # the helper raises on "length" by design; the answer is there
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    return {
        "text": choice.message.content or "",
        "calls": [
            {"name": c.function.name, "arguments": parse_args(c.function.arguments)} for c in calls
        ],
        "finish": choice.finish_reason,
        "role": choice.message.role,
    }


def got_create(base_url: str, key: str, response: Recorded, want: Meant) -> dict[str, Any]:
    client = openai_client(base_url, key)
    kwargs = {"tools": tools_for(response, want)} if tools_for(response, want) else {}
    messages = [{"role": "user", "content": "go"}]
    if response.kind == "json":
        completion = client.chat.completions.create(
            model=model_of(response), messages=messages, **kwargs
        )
        choice = completion.choices[0]
        calls = choice.message.tool_calls or []
        bad = [c.id for c in calls if not c.id or c.type != "function"]
        return {
            "text": choice.message.content or "",
            "calls": [
                {"name": c.function.name, "arguments": parse_args(c.function.arguments)}
                for c in calls
            ],
            "finish": choice.finish_reason,
            "role": choice.message.role,
            **({"call without id/type": bad} if bad else {}),
        }
    text, finish, role, by_index = "", None, None, {}
    with client.chat.completions.create(
        model=model_of(response), messages=messages, stream=True, **kwargs
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                role = role or delta.role
                text += delta.content if isinstance(delta.content, str) else ""
                for tc in delta.tool_calls or []:
                    call = by_index.setdefault(tc.index, {"name": "", "arguments": ""})
                    if tc.function and tc.function.name:
                        call["name"] += tc.function.name
                    if tc.function and tc.function.arguments:
                        call["arguments"] += tc.function.arguments
                finish = choice.finish_reason or finish
    calls = [
        {"name": c["name"] or None, "arguments": parse_args(c["arguments"])}
        for _, c in sorted(by_index.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    ]
    return {"text": text, "calls": calls, "finish": finish, "role": role}


def got_vercel(sdk: str) -> Callable[..., dict[str, Any]]:
    def run(base_url: str, key: str, response: Recorded, want: Meant) -> dict[str, Any]:
        tools = [
            {"name": t["function"]["name"], "parameters": t["function"].get("parameters") or {}}
            for t in tools_for(response, want)
        ]
        result = run_vercel(sdk, base_url, model_of(response), tools, api_key=key)
        if result["errors"]:
            return {"error": "; ".join(result["errors"])[:160], "finish": result["finishReason"]}
        finish = {"tool-calls": "tool_calls", "content-filter": "content_filter"}.get(
            result["finishReason"], result["finishReason"]
        )
        out = {
            "text": result["text"],
            "calls": [
                {"name": c["toolName"], "arguments": c["input"]} for c in result["toolCalls"]
            ],
            "finish": finish,
        }
        if sdk != "v1":
            out["raw finish"] = result["rawFinishReason"]
        return out

    return run


def at_error(body: bytes) -> tuple[bytes, bytes]:
    """`body` cut where the upstream's in-band error starts (an `event: error`, or a chunk with
    a top-level `error`): the events before it, and the rest."""
    decoder, offset = SSEDecoder(), 0
    for event in decoder.feed(body) + decoder.flush():
        if event.event == "error" or _has_error(event.data or ""):
            return body[:offset], body[offset:]
        offset += len(event.raw)
    return body, b""


def _has_error(data: str) -> bool:
    if not data.startswith("{"):
        return False
    try:
        value = json.loads(data)
    except json.JSONDecodeError:
        return False
    return isinstance(value, dict) and bool(value.get("error"))


def check_wire(base_url: str, key: str, response: Recorded, want: Meant, emit: str) -> str:
    if response.kind == "json":
        return "n/a"
    body = {
        "model": model_of(response),
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    got = httpx.post(
        f"{base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ).content
    if not want.error:
        problems = violations(got, emit)
    else:
        # The rules hold up to the upstream's error; from it on, what the upstream sent and
        # nothing else (no invented finish, no [DONE] it did not send).
        before, after = at_error(got)
        problems = [p for p in violations(before + DONE, emit) if "finish" not in p]
        if after != at_error(response.sse)[1]:
            problems.append(f"after the error: {_short(after.decode())} != the upstream's")
    return "PASS" if not problems else "; ".join(problems)[:160]


def expected(want: Meant, column: str) -> dict[str, Any]:
    out: dict[str, Any] = {"text": want.text, "calls": want.calls, "finish": want.finish}
    if column in ("stream", "create"):
        out["role"] = "assistant"
    if column in ("ai v2", "ai v3"):
        out["raw finish"] = want.finish
    return out


def verdict(got: dict[str, Any], want: Meant, column: str) -> str:
    if want.error:
        if "error" not in got:
            return f"no error reported (finish {got.get('finish')!r})"
        if got.get("finish") not in (None, "error"):
            return f"error reported, but finish {got['finish']!r} after it"
        return "PASS"
    if "error" in got:
        return f"error: {got['error']}"
    wanted = expected(want, column)
    diffs = [
        f"{key}: {_short(got.get(key))} != {_short(value)}"
        for key, value in wanted.items()
        if got.get(key) != value
    ]
    diffs += [f"{key}: {_short(got[key])}" for key in got if key not in wanted]
    return "PASS" if not diffs else "; ".join(diffs)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 70 else text[:67] + "..."


def run_client(
    column: str, base_url: str, key: str, response: Recorded, want: Meant, emit: str
) -> str:
    if column == "wire":
        return check_wire(base_url, key, response, want, emit)
    if response.kind == "json" and response.status < 400 and column != "create":
        return "n/a"
    runner = {"stream": got_stream, "create": got_create}.get(column) or got_vercel(column[3:])
    try:
        got = runner(base_url, key, response, want)
    except openai.APIStatusError as exc:
        got = {"error": f"{exc.status_code} {exc.message}"[:120]}
    except openai.APIError as exc:
        got = {"error": f"{type(exc).__name__}: {exc.message}"[:120]}
    except Exception as exc:  # a client crashing on the stream is a result, not a bug here
        got = {"error": f"{type(exc).__name__}: {exc}"[:120]}
    return verdict(got, want, column)


# ── the request side ─────────────────────────────────────────────────────────


def check_requests(base_url: str, fake: Fake, conversation: Conversation) -> str:
    key = f"conversation-{conversation.stem}"
    diffs = []
    for number, (sent, response) in enumerate(conversation.turns):
        fake.responses[key] = response
        httpx.post(
            f"{base_url}/chat/completions",
            json=sent,
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        ).read()
        if fake.received.get(key) != sent:
            diffs.append(f"turn{number}: " + "; ".join(json_diff(sent, fake.received.get(key))))
    return "PASS" if not diffs else " | ".join(diffs)


# ── the follow-ups: each answer taken by a client, and its next request ─────────

# What an upstream hands out with an answer and needs back on the next request (the evidence
# profile's receipts): Google's signature, on a call or on the message, in Google's or Vertex's
# namespace; OpenRouter's and the AI Gateway's reasoning_details; the reasoning_content of a
# tool-calling turn (DeepSeek, Kimi, GLM, Qwen thinking models).
SIGNATURES = (("extra_content", "google", "thought_signature"),)
SIGNATURES += (("extra_content", "vertex", "thought_signature"),)
MESSAGE_RECEIPTS = (*SIGNATURES, ("reasoning_details",), ("reasoning_content",))
SDK_ARGUMENTS = ("model", "messages", "tools", "tool_choice", "temperature", "max_tokens")


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value if value not in (None, "", []) else None


def _drop(value: dict[str, Any], path: tuple[str, ...]) -> None:
    """`path` removed from `value`, and the objects it leaves empty with it."""
    holder = value.get(path[0])
    if len(path) == 1 or not isinstance(holder, dict):
        value.pop(path[0], None)
        return
    _drop(holder, path[1:])
    if not holder:
        value.pop(path[0])


@dataclass
class Issued:
    """The receipts one recorded answer carried: on the message, and per call (by position)."""

    message: dict[tuple[str, ...], Any] = field(default_factory=dict)
    calls: dict[int, dict[tuple[str, ...], Any]] = field(default_factory=dict)
    exact: bool = True
    """False for a stream: its values are assembled here only roughly (presence is checked)."""


def issued_by(response: Recorded) -> Issued:
    if response.kind == "json":
        message = json.loads(response.body)["choices"][0]["message"]
        found = Issued({p: v for p in MESSAGE_RECEIPTS if (v := _get(message, p)) is not None})
        for n, call in enumerate(message.get("tool_calls") or ()):
            signed = {p: v for p in SIGNATURES if (v := _get(call, p)) is not None}
            if signed:
                found.calls[n] = signed
        return found
    found = Issued(exact=False)
    chunks, _ = sse_chunks(response.sse)
    order: dict[Any, int] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {} if choice.get("index", 0) == 0 else {}
            found.message.update({p: True for p in MESSAGE_RECEIPTS if _get(delta, p)})
            for entry in delta.get("tool_calls") or ():
                where = entry.get("index", len(order)) if entry.get("id") else None
                position = order.setdefault(where, len(order)) if where is not None else None
                for path in SIGNATURES:
                    if _get(entry, path) and position is not None:
                        found.calls.setdefault(position, {})[path] = True
    return found


def sdk_answer(base_url: str, key: str, request: dict[str, Any], response: Recorded) -> Any:
    """The assistant message as the OpenAI Python SDK hands it to the app, which sends it
    back: `create()`'s message, or the stream helper's final message, `model_dump()`ed."""
    client = openai_client(base_url, key)
    kwargs = {k: v for k, v in request.items() if k in SDK_ARGUMENTS}
    extra = {k: v for k, v in request.items() if k not in (*SDK_ARGUMENTS, "stream")}
    if response.kind == "json":
        completion = client.chat.completions.create(**kwargs, extra_body=extra or None)
    else:
        with client.chat.completions.stream(**kwargs, extra_body=extra or None) as stream:
            for _ in stream:
                pass
            completion = stream.get_final_completion()
    message = completion.choices[0].message.model_dump(exclude_none=True)
    for name in ("parsed", "refusal", "annotations", "audio", "function_call"):
        message.pop(name, None)
    for call in message.get("tool_calls") or ():
        call.pop("parsed_arguments", None)
        (call.get("function") or {}).pop("parsed_arguments", None)
    return message


def check_follow_ups(base_url: str, fake: Fake, conversation: Conversation) -> str:
    """Each recorded answer taken by the OpenAI SDK through the proxy and sent back in the
    client's own next request (the recorded one, with the SDK's message in place of the
    recorded one and the tool results' ids mapped to it): the upstream must get every receipt
    it issued, both when the client keeps them in the message (`keeps`) and when it drops
    them (`drops`). Stops where the corpus has not enough to build the next request."""
    notes: list[str] = []
    followed = 0
    for variant in ("keeps", "drops"):
        key = f"follow-{variant}-{conversation.stem}"
        messages = list(conversation.turns[0][0]["messages"])
        built: list[tuple[int, Issued]] = []  # (position in messages, what its answer issued)
        for n, (recorded, response) in enumerate(conversation.turns[:-1]):
            if meant(response).error:
                break  # an error answer: no message to send back
            fake.responses[key] = response
            try:
                message = sdk_answer(base_url, key, {**recorded, "messages": messages}, response)
            except Exception as exc:  # a client failing here is a result
                notes.append(f"{variant} turn{n}: {type(exc).__name__}: {exc}"[:120])
                break
            next_request = conversation.turns[n + 1][0]
            place = len(recorded["messages"])
            nexts = next_request["messages"]
            if len(nexts) <= place or nexts[place].get("role") != "assistant":
                notes.append(f"turn{n + 1}: not built (no assistant message at {place})")
                break
            recorded_ids = [c.get("id") for c in nexts[place].get("tool_calls") or ()]
            sdk_ids = [c.get("id") for c in message.get("tool_calls") or ()]
            if len(recorded_ids) != len(sdk_ids):
                notes.append(
                    f"turn{n + 1}: not built ({len(sdk_ids)} calls, recorded {len(recorded_ids)})"
                )
                break
            if variant == "drops":
                for path in MESSAGE_RECEIPTS:
                    _drop(message, path)
                for call in message.get("tool_calls") or ():
                    _drop(call, ("extra_content",))
            ids = dict(zip(recorded_ids, sdk_ids, strict=True))
            rest = [
                {**m, "tool_call_id": ids.get(m.get("tool_call_id"), m.get("tool_call_id"))}
                if m.get("role") == "tool"
                else m
                for m in nexts[place + 1 :]
            ]
            built.append((len(messages), issued_by(response)))
            messages = [*messages, message, *rest]
            fake.responses[key] = conversation.turns[n + 1][1]
            httpx.post(
                f"{base_url}/chat/completions",
                json={**next_request, "messages": messages},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            ).read()
            followed += 1
            forwarded = (fake.received.get(key) or {}).get("messages") or []
            notes += [f"{variant} turn{n + 1}: {m}" for m in _receipts_missing(forwarded, built)]
    if not notes and not followed:
        return "n/a"  # no answer a client could send back (errors only)
    return "PASS" if not notes else " | ".join(dict.fromkeys(notes))[:300]


def _receipts_missing(forwarded: list[Any], built: list[tuple[int, Issued]]) -> list[str]:
    missing = []
    for position, issued in built:
        sent = forwarded[position] if position < len(forwarded) else {}
        calls = sent.get("tool_calls") or []
        wanted = [("message", sent, issued.message)]
        wanted += [
            (f"call {n}", calls[n] if n < len(calls) else {}, v) for n, v in issued.calls.items()
        ]
        for where, holder, receipts in wanted:
            for path, value in receipts.items():
                if path == ("reasoning_content",) and not calls:
                    continue  # a text turn's reasoning is not asked back
                got = _get(holder, path)
                if got is None or (issued.exact and got != value):
                    state = "missing" if got is None else "altered"
                    missing.append(f"message {position} {where}: {'.'.join(path)} {state}")
    return missing


def json_diff(sent: Any, got: Any, path: str = "") -> list[str]:
    if isinstance(sent, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(sent) | set(got)):
            if key not in got:
                out.append(f"{path}.{key} removed")
            elif key not in sent:
                out.append(f"{path}.{key} added: {_short(got[key])}")
            else:
                out += json_diff(sent[key], got[key], f"{path}.{key}")
        return out
    if isinstance(sent, list) and isinstance(got, list) and len(sent) == len(got):
        return [
            d
            for i, (a, b) in enumerate(zip(sent, got, strict=True))
            for d in json_diff(a, b, f"{path}[{i}]")
        ]
    return [] if sent == got else [f"{path or '.'}: {_short(sent)} -> {_short(got)}"]


# ── the table ────────────────────────────────────────────────────────────────


def run_table(
    emit: str,
    base_url: str,
    fake: Fake,
    responses: list[Recorded],
    columns: list[str],
    prefix: str,
) -> dict[tuple[str, str], str]:
    cells: dict[tuple[str, str], str] = {}
    lock = threading.Lock()

    def one(response: Recorded, column: str) -> None:
        key = f"{prefix}-{column}-{response.row}"
        with lock:
            fake.responses[key] = response
        cells[(response.row, column)] = run_client(
            column, base_url, key, response, meant(response), emit
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(one, r, c) for r in responses for c in columns]:
            future.result()
    return cells


def render(title: str, rows: list[str], columns: list[str], cells: dict) -> None:
    print(f"\n## {title}\n")
    passed = sum(v == "PASS" for v in cells.values())
    failed = sum(v not in ("PASS", "n/a") for v in cells.values())
    print("| file | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for row in rows:
        values = [cells.get((row, c), "").replace("|", "\\|") for c in columns]
        print(f"| {row} | " + " | ".join(values) + " |")
    print(f"\n{passed} PASS, {failed} not right")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--only", default="", help="rows whose file name contains this")
    parser.add_argument("--no-vercel", action="store_true")
    parser.add_argument("--no-direct", action="store_true")
    parser.add_argument("--emit", choices=("atomic", "incremental"), default="atomic")
    args = parser.parse_args()

    manifest = manifest_of(args.corpus)
    paths = [p for p in response_files(args.corpus) if args.only in p.stem]
    responses = [r for path in paths for r in load(path, manifest)]
    by_stem = {r.row: r for r in responses}
    columns = [c for c in CLIENTS if not (args.no_vercel and c.startswith("ai "))]
    rows = [r.row for r in responses]

    fake = Fake()
    with serve_in_thread(fake.app) as fake_url:
        upstream = f"{fake_url}/v1"
        settings = Settings().with_values(
            {"upstream.base_url": upstream, "tool_calls.emit": args.emit}
        )
        with serve_in_thread(create_app(settings)) as proxy_url:
            proxy = f"{proxy_url}/v1"
            if not args.no_direct:
                cells = run_table("incremental", upstream, fake, responses, columns, "direct")
                render("direct: client -> fake upstream", rows, columns, cells)
            cells = run_table(args.emit, proxy, fake, responses, columns, "proxy")
            talks = conversations(paths, by_stem)
            for conversation in talks:
                last = conversation.turns[-1][1].row
                cells[(last, "request")] = check_requests(proxy, fake, conversation)
                cells[(last, "follow-up")] = check_follow_ups(proxy, fake, conversation)
            render(
                f"through the proxy ({args.emit}): client -> streamfix -> fake upstream",
                rows,
                [*columns, "request", "follow-up"] if talks else columns,
                cells,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
