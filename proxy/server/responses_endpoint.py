"""`POST /v1/responses`: the Responses front wired around the chat exchange.

The same admission, auth, routes, limits, learning, metrics, log line and `x-streamfix-repairs`
as chat completions: the Responses request becomes the chat request (fronts/responses/
request.py), that goes through the request repairs and upstream exactly as a chat request
does, and the repaired chat stream becomes Responses events (fronts/responses/events.py).

An upstream refusal before the first byte is answered with its HTTP status and an OpenAI error
body, never as a stream: Codex retries a `response.failed` five times, so a deterministic 400
would become six requests. While the upstream is silent, a `response.in_progress` goes out
every KEEPALIVE_SECONDS (Codex gives up after 300 s of silence). What a follow-up needs (the
turn's receipts, the transcript, the items) is written before the terminal event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.fronts import receipt_tokens
from proxy.fronts.responses.events import (
    CLEAN,
    End,
    ResponsesEvents,
    aborted,
    completion_chunk,
    upstream_error,
)
from proxy.fronts.responses.events import whole as whole_response
from proxy.fronts.responses.request import FrontError, Lookups, Translation, translate
from proxy.fronts.responses.store import ResponsesStore, turn_key
from proxy.repair.pipeline import RepairChain, as_chunk, is_done, is_upstream_error, repaired_stream
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope, tenant_of
from proxy.server.chat_request import model_of
from proxy.server.delivery import SSE_HEADERS, _Closing, raw_body, repairs_header
from proxy.server.errors import ClientError
from proxy.server.record import ExchangeRecord
from proxy.server.streamed_response import StreamedResponse
from proxy.upstream.body_decoding import decoded, decoder_for, read_limited
from proxy.upstream.context import ClientCopy
from proxy.upstream.failures import describe_failure
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEDecoder

if TYPE_CHECKING:
    from proxy.server.app import Proxy

logger = logging.getLogger(__name__)

CHAT_PATH = b"chat/completions"
KEEPALIVE_SECONDS = 15.0
ERROR_BODY_BYTES = 65_536
_ABORT_EVENT = "streamfix-abort"


async def responses(proxy: Proxy, request: Request) -> Response:
    from proxy.server.app import new_request_id

    request_id = request.headers.get("x-request-id") or new_request_id()
    raw = await proxy._admitted_body(request, request_id)
    if isinstance(raw, Response):
        return raw
    try:
        body = json_codec.loads(raw)
    except json_codec.JSONDecodeError as exc:
        error = ClientError(400, f"request body is not valid JSON: {exc}", "invalid_json")
        return proxy._refused(error, request, request_id)
    if not isinstance(body, dict):
        error = ClientError(400, "request body must be a JSON object", "invalid_request")
        return proxy._refused(error, request, request_id)
    route = proxy.router.route_for(body.get("model"))
    query = request.scope.get("query_string", b"")
    tenant = tenant_of(request.headers, proxy.settings.receipts.tenant_header, query=query)
    store = ResponsesStore(proxy.store, ReceiptScope(tenant, route.identity))
    lookups = Lookups(store.transcript, store.turn, store.items, store.token_scope)
    try:
        translation = await translate(body, lookups)
    except FrontError as exc:
        refusal = Response(
            orjson.dumps(exc.body), status_code=exc.status, media_type="application/json"
        )
        from proxy.server.app import _plain_record

        return proxy._failed(_plain_record(request, request_id, "-", model_of(raw)), refusal)
    chat = translation.chat
    if route.upstream.model:
        chat["model"] = route.upstream.model
    started = time.monotonic()
    rules = route.rules(chat.get("model"))
    recalled = await proxy.refusals.recall(route.identity, chat, rules)
    record = proxy._record(request, request_id, chat, route, started)
    for kind, amount in translation.counts.items():
        record.tally.count(kind, amount)
    scope = ReceiptScope(tenant, route.identity)
    pristine = deepcopy(chat)  # phase one may run again (a learned refusal's resend)
    forwarded, _ = await proxy.phases.request(chat, recalled.applied(rules), scope, record.tally)
    record.forwarded = forwarded

    async def rebuild(rules: RouteRules) -> dict[str, Any]:
        """Phase one again, as chat does it (app.py), on the translated request; the
        translation's own counts go with the fresh tally."""
        record.tally = Tally(request_id)
        for kind, amount in translation.counts.items():
            record.tally.count(kind, amount)
        again = deepcopy(pristine)
        record.forwarded, _ = await proxy.phases.request(again, rules, scope, record.tally)
        return record.forwarded.body

    upstream = await proxy._send(
        request,
        route,
        CHAT_PATH,
        json_codec.dumps(forwarded.body),
        record,
        resend=forwarded.body,
        rebuild=rebuild,
    )
    forwarded = record.forwarded
    assert forwarded is not None  # set by phase one above
    translation.chat = forwarded.body  # what the store keeps is what went upstream
    exchange = record.tally
    if isinstance(upstream, Response):
        return proxy._failed(record, upstream)  # already OpenAI's error shape
    # Phase two: the stream links, built from what phase one decided.
    chain = proxy.phases.stream(forwarded, record.tally)
    status = upstream.status_code
    decoder = decoder_for(upstream.headers.get("content-encoding", ""))
    if status >= 400 or decoder is None:
        return await _refusal(proxy, record, upstream, decoder is None)
    events = ResponsesEvents(
        translation,
        body,
        token=None,
    )
    if store.usable:
        events.token = receipt_tokens.mint(store.token_scope, turn_key(events.id))
    client_headers = proxy._client_headers(upstream, request_id, decoded=True)
    content_type = upstream.headers.get("content-type", "")
    if "text/event-stream" in content_type:
        proxy.metrics.active_streams.inc()

        def stream_closed() -> None:
            proxy.metrics.active_streams.dec()
            proxy._finished(record, status)

        # A recording keeps the repaired chat stream, what `streamfix replay` and `explain`
        # re-derive from the cassette; the Responses events are a translation of it.
        copy, record.client_copy = record.client_copy, None
        stream = _events(proxy, upstream, chain, record, events, store, translation, decoder, copy)
        kept = [
            (name, value)
            for name, value in client_headers
            if name.lower() not in (b"content-type", b"content-length", *dict(SSE_HEADERS))
        ]
        return StreamedResponse(
            _Closing(upstream, stream, record, stream_closed),
            status_code=200,
            headers=[*kept, *SSE_HEADERS, repairs_header(exchange)],
            media_type="text/event-stream",
        )
    return await _whole(proxy, upstream, chain, record, events, store, translation, decoder)


async def _events(
    proxy: Proxy,
    upstream: httpx.Response,
    chain: RepairChain,
    record: ExchangeRecord,
    events: ResponsesEvents,
    store: ResponsesStore,
    translation: Translation,
    decoder: Any,
    copy: ClientCopy | None = None,
) -> AsyncIterator[bytes]:
    """The repaired chat stream, decoded once more into chunks, as Responses events."""
    exchange = record.tally

    def abort(exc: Exception) -> bytes:
        exchange.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
        if isinstance(exc, LimitExceeded):
            message, code = str(exc), exc.code
        else:
            _, message, code = describe_failure(exc, None)
        data = orjson.dumps({"message": message, "code": code})
        return b"event: " + _ABORT_EVENT.encode() + b"\ndata: " + data + b"\n\n"

    chat_stream = repaired_stream(
        decoded(raw_body(upstream), decoder),
        chain,
        SSEDecoder(proxy.settings.server.max_event_bytes),
        (httpx.HTTPError, LimitExceeded),
        abort,
        exchange.count,
    )
    if copy is not None:
        chat_stream = _copied(chat_stream, copy)
    yield b"".join(events.start())
    again = SSEDecoder()
    end: End | None = None
    async for piece in _with_keepalives(chat_stream, events):
        if isinstance(piece, _Keepalive):
            yield events.keepalive()
            continue
        out: list[bytes] = []
        for event in again.feed(piece):
            if end is not None:
                break
            if event.event == _ABORT_EVENT and event.data:
                found = orjson.loads(event.data)
                end = aborted(found["message"], found["code"])
                continue
            chunk = as_chunk(event)
            if is_upstream_error(event, chunk):
                end = upstream_error(chunk or {"message": event.data or ""})
            elif chunk is not None:
                out += events.feed(chunk)
            elif is_done(event):
                end = CLEAN
        if out:
            yield b"".join(out)
        if end is not None and end.kind != "clean":
            break
    end = end or aborted("the upstream stream ended without [DONE]")
    settled = b"".join(events.settle(end))
    if settled:
        yield settled
    await _save(store, events, translation, exchange)
    yield b"".join(events.terminal())


class _Keepalive:
    pass


async def _copied(stream: AsyncIterator[bytes], copy: ClientCopy) -> AsyncIterator[bytes]:
    """The stream, each piece also handed to a recorder's copy, saved however it ends."""
    try:
        async for piece in stream:
            copy.sent(piece)
            yield piece
    finally:
        await copy.save()


async def _with_keepalives(
    stream: AsyncIterator[bytes], events: ResponsesEvents
) -> AsyncIterator[bytes | _Keepalive]:
    """The stream's pieces, and a keepalive marker whenever it stays silent KEEPALIVE_SECONDS.
    The pending read is never cancelled on a keepalive (that would break the stream)."""
    pending: asyncio.Task[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_SECONDS)
            if not done:
                yield _Keepalive()
                continue
            task, pending = pending, None
            try:
                yield task.result()
            except StopAsyncIteration:
                return
    finally:
        if pending is not None:
            # The read runs in its own task: it must have ended before the stream is closed
            # (an async generator cannot be closed while it runs).
            pending.cancel()
            await asyncio.wait({pending})
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def _save(
    store: ResponsesStore, events: ResponsesEvents, translation: Translation, exchange: Any
) -> None:
    """Before the terminal event: the turn (for the token), and when the client stores, the
    transcript and the items. A failed write is counted; the answer still goes out."""
    if not store.usable or events.status == "failed":
        return
    assistant = events.assistant_message()
    transcript = None
    items: list[dict[str, Any]] = []
    if translation.store:
        transcript = [*translation.transcript_without_instructions(), assistant]
        items = events.output
    if not await store.save(events.id, assistant, transcript, items):
        exchange.note("responses_store_failed", "response %s not stored", events.id)


async def _whole(
    proxy: Proxy,
    upstream: httpx.Response,
    chain: RepairChain,
    record: ExchangeRecord,
    events: ResponsesEvents,
    store: ResponsesStore,
    translation: Translation,
    decoder: Any,
) -> Response:
    status = upstream.status_code
    try:
        pieces = decoded(raw_body(upstream), decoder)
        raw = await read_limited(
            pieces, proxy.settings.server.max_response_bytes, upstream.headers.get("content-length")
        )
        completion = json_codec.loads(raw)
    except (httpx.HTTPError, LimitExceeded, json_codec.JSONDecodeError) as exc:
        proxy._finished(record, 502)
        return _error(
            502,
            f"the upstream answer could not be read: {type(exc).__name__}",
            "upstream_error",
            record,
        )
    finally:
        await upstream.aclose()
    if not isinstance(completion, dict):
        proxy._finished(record, 502)
        return _error(502, "the upstream answer is not a JSON object", "upstream_error", record)
    if completion.get("error") and not completion.get("choices"):
        # An error in a 200 body: the client gets it as an error, not as an empty answer.
        message, code, _, _ = _upstream_error_fields(raw, 502)
        proxy._finished(record, 502)
        return _error(502, message, code, record)
    await chain.on_response(completion)
    if translation.stream:
        # An upstream that answered a streamed request whole: the client still gets events.
        parts = [*events.feed(completion_chunk(completion)), *events.settle(CLEAN)]
        await _save(store, events, translation, record.tally)
        parts += events.terminal()
        body = b"".join(parts)
        answer = Response(body, status_code=200, media_type="text/event-stream")
    else:
        response = whole_response(events, completion)
        await _save(store, events, translation, record.tally)
        body = orjson.dumps(response)
        answer = Response(body, status_code=200, media_type="application/json")
    proxy._finished(record, status)
    if record.client_copy is not None:  # the repaired chat answer, as for a stream
        record.client_copy.sent(json_codec.dumps(completion))
        await record.client_copy.save()
    answer.headers["x-request-id"] = record.request_id
    answer.raw_headers.append(repairs_header(record.tally))
    return answer


async def _refusal(
    proxy: Proxy, record: ExchangeRecord, upstream: httpx.Response, undecodable: bool
) -> Response:
    """The upstream refused before its first byte: its status, with OpenAI's error body."""
    status = upstream.status_code if not undecodable else 502
    try:
        raw = await read_limited(raw_body(upstream), ERROR_BODY_BYTES, None)
    except (httpx.HTTPError, LimitExceeded):
        raw = b""
    finally:
        await upstream.aclose()
    message, code, type_, param = _upstream_error_fields(raw, status)
    if undecodable:
        message, code = "the upstream's Content-Encoding cannot be decoded", "upstream_error"
    proxy._finished(record, status)
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    answer = Response(orjson.dumps(body), status_code=status, media_type="application/json")
    answer.headers["x-request-id"] = record.request_id
    answer.raw_headers.append(repairs_header(record.tally))
    return answer


def _upstream_error_fields(raw: bytes, status: int) -> tuple[str, str, str, Any]:
    try:
        found = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        found = None
    if isinstance(found, list) and found and isinstance(found[0], dict):
        found = found[0]  # Gemini's OpenAI endpoint answers errors in a list
    inner = found.get("error") if isinstance(found, dict) else None
    if isinstance(inner, dict):
        return (
            str(inner.get("message") or f"upstream answered {status}"),
            str(inner.get("code") or inner.get("status") or "upstream_error"),
            str(inner.get("type") or ("invalid_request_error" if status < 500 else "server_error")),
            inner.get("param"),
        )
    text = raw.decode("utf-8", "replace")[:500] if raw else f"upstream answered {status}"
    kind = "invalid_request_error" if status < 500 else "server_error"
    return (str(inner) if isinstance(inner, str) else text, "upstream_error", kind, None)


def _error(status: int, message: str, code: str, record: ExchangeRecord) -> Response:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    answer = Response(orjson.dumps(body), status_code=status, media_type="application/json")
    answer.headers["x-request-id"] = record.request_id
    answer.raw_headers.append(repairs_header(record.tally))
    return answer


async def not_offered(request: Request) -> Response:
    """GET /v1/responses/{id}, /input_items, /cancel, /compact: not offered, said plainly."""
    body = {
        "error": {
            "message": "streamfix's Responses bridge does not offer "
            f"{request.method} {request.url.path}: responses are answered and kept only for "
            "previous_response_id and item_reference",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_implemented",
        }
    }
    return Response(orjson.dumps(body), status_code=501, media_type="application/json")
