"""`POST /v1/messages` and `/v1/messages/count_tokens`: Anthropic's Messages API in front of
the chat core (issue 30).

The Messages request becomes a chat request (proxy/fronts/messages/request.py), which then goes
exactly the way a chat client's does: the same admission and limits, the same repair chain on
the request and on every chunk, the same send, learning, metrics and log line. The repaired
chunks become Messages events (proxy/fronts/messages/events.py) instead of being encoded as
chat chunks. What the bridge itself did is counted on the exchange beside the repairs, so
`x-streamfix-repairs`, the log line and the metrics show it.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.fronts import receipt_tokens
from proxy.fronts.messages import events as message_events
from proxy.fronts.messages.request import MessagesError, Translated, error_body, translate
from proxy.repair.pipeline import RepairChain, as_chunk, is_done, is_upstream_error
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope, tenant_of
from proxy.server.delivery import SSE_HEADERS, _Closing, raw_body, repairs_header
from proxy.server.quiet_pings import with_pings
from proxy.server.streamed_response import StreamedResponse
from proxy.upstream.body_decoding import Decoder, decoded, decoder_for, read_limited
from proxy.upstream.failures import describe_failure
from proxy.wire import json_codec
from proxy.wire.limits import LimitExceeded
from proxy.wire.sse import SSEDecoder

if TYPE_CHECKING:
    from proxy.server.app import Proxy

CHAT_PATH = b"chat/completions"

PING_SECONDS = 10.0
"""A `ping` event after this long without anything to send: Anthropic's own streams ping, and
a silent upstream (a model thinking before its first token) must not look like a dead one to a
client or an idle-timeout hop between."""

# Anthropic's request headers mean nothing to a chat upstream; the key moves to Authorization.
_ANTHROPIC_ONLY = frozenset({b"anthropic-version", b"anthropic-beta", b"x-api-key"})


def _as_chat_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers as a chat upstream expects them: `x-api-key` becomes
    `Authorization: Bearer` (unless the client sent one), Anthropic's own headers go. The
    tenant is then the same as a chat client's with that key (proxy/repair/tenancy.py)."""
    names = {name.lower() for name, _ in raw}
    key = next((value for name, value in raw if name.lower() == b"x-api-key"), None)
    out = [(name, value) for name, value in raw if name.lower() not in _ANTHROPIC_ONLY]
    if key and b"authorization" not in names:
        out.append((b"authorization", b"Bearer " + key.strip()))
    return out


def _error(status: int, message: str) -> Response:
    return JSONResponse(error_body(status, message), status_code=status)


def _scope_key(request: Request, proxy: Proxy, identity: str) -> str:
    tenant = tenant_of(
        request.headers,
        proxy.settings.receipts.tenant_header,
        query=request.scope.get("query_string", b""),
    )
    return f"{tenant or '-'}:{identity}"


async def messages(proxy: Proxy, request: Request) -> Response:
    from proxy.server.app import new_request_id

    request_id = request.headers.get("x-request-id") or new_request_id()
    raw = await proxy._admitted_body(request, request_id)
    if isinstance(raw, Response):
        return _anthropic_refusal(raw)
    request = Request(
        dict(request.scope, headers=_as_chat_headers(request.scope["headers"])), request.receive
    )
    try:
        given = json_codec.loads(raw)
    except json_codec.JSONDecodeError as exc:
        return _refused(proxy, request, request_id, MessagesError(f"invalid JSON: {exc}"))
    model = given.get("model") if isinstance(given, dict) else None
    route = proxy.router.route_for(model)
    scope_key = _scope_key(request, proxy, route.identity)

    def read_token(token: str) -> str | None:
        return receipt_tokens.read(token, scope_key)

    def chat_request() -> Translated:
        translated = translate(given, request.headers, read_token)
        if route.upstream.model and translated.body.get("model") != route.upstream.model:
            translated.body["model"] = route.upstream.model
        return translated

    try:
        translated = chat_request()
    except MessagesError as exc:
        return _refused(proxy, request, request_id, exc, model)
    body = translated.body
    started = time.monotonic()  # the clock the app's bookkeeping reads
    rules = route.rules(body.get("model"))
    recalled = await proxy.refusals.recall(route.identity, body, rules)
    record = proxy._record(request, request_id, body, route, started)
    _count(record.tally, translated.counts)
    # Phase one: the request repairs on the chat request the Messages request became.
    scope = ReceiptScope(proxy._tenant(request), route.identity)
    forwarded, _ = await proxy.phases.request(body, recalled.applied(rules), scope, record.tally)
    record.forwarded = forwarded
    content = json_codec.dumps(forwarded.body)

    async def rebuild(rules: RouteRules) -> dict[str, Any]:
        """Phase one again from the client's Messages request, with the rules a refusal
        called for (upstream/refusals.py), as the chat handler does: a fresh tally."""
        again = chat_request()
        record.tally = Tally(request_id)
        _count(record.tally, again.counts)
        record.forwarded, _ = await proxy.phases.request(again.body, rules, scope, record.tally)
        return record.forwarded.body

    upstream = await proxy._send(
        request, route, CHAT_PATH, content, record, resend=forwarded.body, rebuild=rebuild
    )
    if isinstance(upstream, Response):
        return proxy._failed(record, _anthropic_refusal(upstream))
    forwarded = record.forwarded  # a refusal's resend built it again
    assert forwarded is not None  # set by phase one above
    tally = record.tally
    # Phase two: the stream links, built from what phase one decided.
    chain = proxy.phases.stream(forwarded, tally)
    status = upstream.status_code
    decoder = decoder_for(upstream.headers.get("content-encoding", ""))
    limit = proxy.settings.server.max_response_bytes

    def mint(key: str) -> str:
        return receipt_tokens.mint(scope_key, key)

    stops = given.get("stop_sequences") if isinstance(given.get("stop_sequences"), list) else []
    content_type = upstream.headers.get("content-type", "")
    if status >= 400 or decoder is None:
        try:
            body_bytes = await _read(upstream, decoder, limit)
        except (httpx.HTTPError, LimitExceeded):
            body_bytes = b""
        proxy._finished(record, status if status >= 400 else 502)
        said = message_events.error_message(_loads(body_bytes))
        if decoder is None:
            said = "the upstream's Content-Encoding cannot be decoded by the proxy"
        return _headed(_error(status if status >= 400 else 502, said), record)
    if translated.stream and "text/event-stream" in content_type:
        proxy.metrics.active_streams.inc()

        def closed() -> None:
            proxy.metrics.active_streams.dec()
            proxy._finished(record, status)

        translator = message_events.MessageEvents(translated.model, mint=mint, stop_sequences=stops)
        stream = _events(
            upstream,
            decoder,
            chain,
            translator,
            record,
            proxy.settings.server.max_event_bytes,
        )
        return StreamedResponse(
            _Closing(upstream, stream, record, closed),
            status_code=200,
            headers=[
                *SSE_HEADERS,
                (b"x-request-id", request_id.encode("latin-1")),
                repairs_header(tally),
            ],
            media_type="text/event-stream",
        )
    try:
        body_bytes = await _read(upstream, decoder, limit)
    except (httpx.HTTPError, LimitExceeded) as exc:
        proxy._finished(record, 502)
        return _headed(_error(502, _failure_message(exc)), record)
    completion = _loads(body_bytes)
    if not isinstance(completion, dict) or "choices" not in completion:
        proxy._finished(record, 502)
        return _headed(_error(502, "the upstream's answer is not a chat completion"), record)
    await chain.on_response(completion)
    message = message_events.whole(completion, translated.model, mint=mint, stop_sequences=stops)
    proxy._finished(record, status)
    if translated.stream:  # asked to stream, answered whole: the same message as events
        response: Response = Response(
            b"".join(message_events.events_of(message)), media_type="text/event-stream"
        )
    else:  # encoded as `streamfix replay` renders it (replay.py), byte for byte
        response = Response(json_codec.dumps(message), media_type="application/json")
    if record.client_copy is not None:  # a recording keeps what the client was sent
        record.client_copy.sent(bytes(response.body))
        await record.client_copy.save()
    return _headed(response, record)


def _count(tally: Tally, counts: dict[str, int]) -> None:
    """What the translation did, on the exchange's tally beside the repairs."""
    for kind, amount in counts.items():
        tally.count(kind, amount)


def _headed(response: Response, record: Any) -> Response:
    response.headers["x-request-id"] = record.request_id
    response.raw_headers.append(repairs_header(record.tally))
    return response


def _loads(raw: bytes) -> Any:
    try:
        return json_codec.loads(raw)
    except json_codec.JSONDecodeError:
        return raw.decode(errors="replace")[:500]


def _failure_message(exc: Exception) -> str:
    if isinstance(exc, LimitExceeded):
        return str(exc)
    return describe_failure(exc, None)[1]


async def _read(upstream: httpx.Response, decoder: Decoder | None, limit: int) -> bytes:
    try:
        pieces = raw_body(upstream)
        if decoder is not None:
            pieces = decoded(pieces, decoder)
        return await read_limited(pieces, limit, upstream.headers.get("content-length"))
    finally:
        await upstream.aclose()


def _refused(
    proxy: Proxy, request: Request, request_id: str, error: MessagesError, model: object = None
) -> Response:
    """Refused before anything went upstream: logged and counted like the chat refusals."""
    from proxy.server.app import _plain_record

    record = _plain_record(request, request_id, "-", model)
    return proxy._failed(record, JSONResponse(error.body, status_code=error.status))


def _anthropic_refusal(response: Response) -> Response:
    """The proxy's own OpenAI-shaped error (auth, limits, an unreachable upstream) in
    Anthropic's shape, with its status and headers."""
    parsed = _loads(bytes(response.body))
    out = _error(response.status_code, message_events.error_message(parsed))
    for name, value in response.raw_headers:
        if name.lower() not in (b"content-length", b"content-type"):
            out.raw_headers.append((name, value))
    return out


async def _events(
    upstream: httpx.Response,
    decoder: Decoder,
    chain: RepairChain,
    translator: message_events.MessageEvents,
    record: Any,
    max_event_bytes: int,
) -> AsyncIterator[bytes]:
    """The upstream's chat stream, repaired link by link, as Messages events, with a `ping`
    whenever nothing came for PING_SECONDS. The chat pipeline's ends, kept: the upstream's own
    error ends the stream with an `error` event (nothing invented after it), a broken-off
    stream or a bound exceeded with one too, and only a clean end gets `message_stop`."""
    exchange = record.tally
    sse = SSEDecoder(max_event_bytes)
    source = with_pings(decoded(raw_body(upstream), decoder), PING_SECONDS)
    yield b"".join(translator.start())
    try:
        async for data in source:
            if data is None:  # the upstream is silent
                yield b"".join(translator.ping())
                continue
            out, ended = _process(sse.feed(data), chain, translator, exchange)
            if out:
                yield out
            if ended:
                return
        out, ended = _process(sse.flush(), chain, translator, exchange)
        if ended:
            yield out
            return
        for chunk, _ in await chain.on_end():
            out += b"".join(translator.feed(chunk))
        yield out + b"".join(translator.finish(message_events.Clean()))
    except (httpx.HTTPError, LimitExceeded) as exc:
        exchange.note("stream_aborted", "upstream stream failed: %s", type(exc).__name__)
        yield b"".join(translator.finish(message_events.Aborted(_failure_message(exc))))
    finally:
        await source.aclose()
        exchange.count("events_split", sse.splits)
        for kind, amount in translator.counts.items():
            exchange.count(kind, amount)


def _process(
    events: list[Any],
    chain: RepairChain,
    translator: message_events.MessageEvents,
    exchange: Any,
) -> tuple[bytes, bool]:
    """Encoded Messages events for these SSE events, and whether the upstream's error ended
    the stream."""
    out: list[bytes] = []
    for event in events:
        chunk = as_chunk(event)
        if is_upstream_error(event, chunk):
            exchange.count("upstream_error_event", 1)
            body = chunk if chunk is not None else _loads((event.data or "").encode())
            out += translator.finish(message_events.UpstreamError(body))
            return b"".join(out), True
        if chunk is not None:
            for repaired, _ in chain.on_chunk(chunk, None):
                out += translator.feed(repaired)
        elif is_done(event):
            continue
    return b"".join(out), False


async def count_tokens(proxy: Proxy, request: Request) -> Response:
    """An estimate, said to be one: chat-completions upstreams have no counting endpoint, so
    the answer is the UTF-8 size of the chat request this body becomes, divided by four (the
    rule of thumb for English text and JSON with BPE tokenizers), rounded up. The
    `x-streamfix-token-count: estimate` header says so; Claude Code uses the number to decide
    when to compact, for which an estimate serves."""
    from proxy.server.app import new_request_id

    request_id = request.headers.get("x-request-id") or new_request_id()
    raw = await proxy._admitted_body(request, request_id)
    if isinstance(raw, Response):
        return _anthropic_refusal(raw)
    try:
        given = json_codec.loads(raw)
    except json_codec.JSONDecodeError as exc:
        return _refused(proxy, request, request_id, MessagesError(f"invalid JSON: {exc}"))
    if isinstance(given, dict):
        given = {"max_tokens": 1, **given}  # count_tokens takes no max_tokens
    try:
        translated: Translated = translate(given, request.headers)
    except MessagesError as exc:
        return _refused(proxy, request, request_id, exc)
    chat = translated.body
    size = len(json_codec.dumps([chat["messages"], chat.get("tools", [])]))
    response = JSONResponse({"input_tokens": math.ceil(size / 4)})
    response.headers["x-streamfix-token-count"] = "estimate"
    from proxy.server.app import _plain_record

    record = _plain_record(request, request_id, "-", chat.get("model"))
    return proxy._failed(record, response)  # booked and headed like any exchange
