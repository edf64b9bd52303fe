"""A request parameter the upstream rejected, dropped once, and remembered for that upstream.

OpenAI-compatible upstreams refuse a whole request over one top-level parameter they do not
take, before generating anything (so nothing is billed), with a 400 or a 422 whose body names
it. The profiles' tables (proxy/repair/profiles.py) hold what is known; this is for the rest:
when the error names a parameter the request carries, and that is not what the request is
(`PROTECTED`), the request goes once more without it, and the (upstream, model, parameter)
is kept in the receipts' store with a TTL, so later requests go without it at once
(ParameterRepair drops it, from `RouteRules.learned_parameters`). Nothing else is retried: any
other status, an error that names nothing the request has, or a second rejection reach the
client as they came.
"""

from __future__ import annotations

import hashlib
import logging
import re
import zlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx

from proxy.repair.exchange import Exchange
from proxy.repair.receipts.store import MemoryStore, ReceiptStore, RedisStore
from proxy.repair.repairs.parameters import PROTECTED
from proxy.settings.schema import Settings
from proxy.upstream.body_decoding import decoder_for

logger = logging.getLogger(__name__)

REJECTED_STATUSES = (400, 422)
"""Validation errors, answered before generation. Never 429 or 5xx: those may have run."""
MAX_ERROR_BYTES = 64 * 1024
"""The most of an error body read to look for a name; a longer one is relayed unread."""
LEARNED_KIND = "parameter_learned"
KEY_PREFIX = "streamfix:parameters:"
"""The Redis namespace, apart from the receipts'."""

_NAME = r"([A-Za-z_][A-Za-z0-9_]*)"
# How upstreams name the parameter they refuse, each from a real error body (backslashes are
# removed first, so a name inside an error JSON-encoded twice reads the same):
_PHRASES = [
    # OpenAI and Azure: "Unrecognized request argument supplied: system_prompt"
    # (BerriAI/litellm#10791).
    re.compile(r"Unrecognized request argument supplied: " + _NAME),
    # OpenAI: "Unknown parameter: 'stream_options'." (QuantumNous/new-api#418) and
    # "Unsupported parameter: 'parallel_tool_calls' is not supported with this model."
    # (evalstate/fast-agent#279).
    re.compile(r"(?:Unknown|Unsupported) parameter: '" + _NAME + "'"),
    # Groq: "property 'store' is unsupported, did you mean 'stop'?" (fanenr/chatbot#21).
    re.compile(r"property '" + _NAME + "' is unsupported"),
    # DeepSeek: "deepseek-reasoner does not support the parameter `presence_penalty`"
    # (lobehub/lobehub#5523).
    re.compile(r"does not support the parameter `" + _NAME + "`"),
    # Cerebras: "parallel_tool_calls=False is not supported by this model."
    # (agno-agi/agno#4508); Groq: "`logprobs` is not supported with this model"
    # (groq/groq-python#25).
    re.compile(r"(?<![\w.])[`'\"]?" + _NAME + r"(?:=\S+)?[`'\"]? (?:is|are) not supported"),
]
# Gemini: 'Invalid JSON payload received. Unknown name "store": Cannot find field.'
# (Routstr/routstr-core#505). With " at 'tools[0]…'" the name is inside the request (a schema
# keyword, proxy/repair/dialects/), not a parameter; at its own name (`at 'extra_body'`) it is.
_GEMINI = re.compile(r"Unknown name \"" + _NAME + r"\"(?: at '([^']*)')?: Cannot find field")
# Mistral (pydantic): {"type":"extra_forbidden","loc":["body","max_completion_tokens"],
# "msg":"Extra inputs are not permitted"} (editor-code-assistant/eca#231,
# mistralai/platform-docs-public#7); a longer loc is inside the messages, not a parameter.
_EXTRA = re.compile(r"\"loc\"\s*:\s*\[\s*\"body\"\s*,\s*\"" + _NAME + r"\"\s*\]")
_EXTRA_SAID = ("extra_forbidden", "Extra inputs are not permitted")
# xAI: "Argument not supported on this model: frequencyPenalty" (BerriAI/litellm#14056), the
# name in camelCase.
_XAI = re.compile(r"Argument not supported(?: on this model)?: " + _NAME)


def named_parameters(error: str) -> set[str]:
    """Every parameter name the error body says was refused."""
    text = error.replace("\\", "")
    names = {match.group(1) for phrase in _PHRASES for match in phrase.finditer(text)}
    names |= {m.group(1) for m in _GEMINI.finditer(text) if m.group(2) in (None, m.group(1))}
    if any(said in text for said in _EXTRA_SAID):
        names |= {match.group(1) for match in _EXTRA.finditer(text)}
    for match in _XAI.finditer(text):
        names |= {match.group(1), re.sub(r"(?<!^)([A-Z])", r"_\1", match.group(1)).lower()}
    return names


def rejected_parameters(error: str, request: dict[str, Any]) -> list[str]:
    """The top-level parameters to drop for one more try, or [] for none: the error must name
    at least one the request sent, and none of what the request is (dropping `messages` or
    `tools` would answer another question)."""
    named = {name for name in named_parameters(error) if name in request}
    if named & PROTECTED:
        return []
    return sorted(named)


class ParameterMemory:
    """Rejected parameters per upstream and model, in a receipt store's shape (one entry each,
    with the store's TTL): Redis shares them between replicas, the memory store is bounded."""

    def __init__(self, store: ReceiptStore, ttl_seconds: float) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds

    @staticmethod
    def key(identity: str, model: object, name: str) -> str:
        # The model name is the client's text: hashed, so no key grows with it.
        digest = hashlib.sha256(str(model).encode()).hexdigest()[:16]
        return f"{identity}:{digest}:{name}"

    async def recall(self, identity: str, body: dict[str, Any]) -> frozenset[str]:
        """What of this request's parameters its upstream rejected before."""
        names = [name for name in body if name not in PROTECTED]
        if not names:
            return frozenset()
        model = body.get("model")
        keys = {self.key(identity, model, name): name for name in names}
        found = await self.store.get_many(list(keys))
        return frozenset(keys[key] for key in found)

    def remember(self, identity: str, model: object, names: Iterable[str], status: int) -> None:
        self.store.put_later(
            {self.key(identity, model, name): {"status": status} for name in names}
        )

    async def aclose(self) -> None:
        await self.store.aclose()


def open_memory(settings: Settings) -> ParameterMemory:
    """In the receipts' store (`[receipts] store`), under its own keys and bounds."""
    bounds = settings.parameters
    if settings.receipts.store == "memory":
        store: ReceiptStore = MemoryStore(bounds.max_entries, bounds.ttl_seconds)
    else:
        store = RedisStore(settings.receipts.store, bounds.ttl_seconds, prefix=KEY_PREFIX)
    return ParameterMemory(store, bounds.ttl_seconds)


async def read_rejection(
    upstream: httpx.Response, request: dict[str, Any]
) -> tuple[httpx.Response, list[str]]:
    """The parameters a 400/422 `upstream` names, and a response that still gives the client
    every byte of it (the part read here, then the rest) should it go out after all."""
    if upstream.status_code not in REJECTED_STATUSES:
        return upstream, []
    decoder = decoder_for(upstream.headers.get("content-encoding", ""))
    if upstream.is_stream_consumed:  # built from bytes in-process: already whole
        raw, rest, replay = [upstream.content], None, upstream
    else:
        raw, rest = [], upstream.aiter_raw()
        size = 0
        async for piece in rest:
            raw.append(piece)
            size += len(piece)
            if size > MAX_ERROR_BYTES:
                break
        else:
            rest = None
        replay = _replayed(upstream, raw, rest)
        if size > MAX_ERROR_BYTES:
            return replay, []
    if decoder is None:
        return replay, []
    text = b"".join(_decoded(raw, decoder))[: MAX_ERROR_BYTES * 4]
    return replay, rejected_parameters(text.decode("utf-8", "replace"), request)


def learned(exchange: Exchange, route: str, status: int, names: list[str], ttl: float) -> None:
    """Count and log a rejection learned: once, with the request id, at warning level."""
    exchange.count(LEARNED_KIND, len(names))
    logger.warning(
        "[%s] %s: route %s upstream answered %d naming %s; sent once more without it, and "
        "dropped up front for this upstream and model for %.0fs",
        exchange.request_id,
        LEARNED_KIND,
        route,
        status,
        ", ".join(names),
        ttl,
    )


def resent(outgoing: httpx.Request, content: bytes) -> httpx.Request:
    """`outgoing` again, same URL, headers and extensions, with another body."""
    headers = [(k, v) for k, v in outgoing.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(
        outgoing.method,
        outgoing.url,
        headers=headers,
        content=content,
        extensions=outgoing.extensions,
    )


def _decoded(raw: list[bytes], decoder: Any) -> list[bytes]:
    out: list[bytes] = []
    size = 0
    try:
        for piece in raw:
            for part in decoder.decode(piece):
                out.append(part)
                size += len(part)
                if size > MAX_ERROR_BYTES * 4:
                    return out
        out.append(decoder.flush())
    except zlib.error:  # a body that does not decode names nothing (and is relayed as it came)
        return []
    return out


class _Replay(httpx.AsyncByteStream):
    def __init__(
        self, upstream: httpx.Response, read: list[bytes], rest: AsyncIterator[bytes] | None
    ):
        self._upstream = upstream
        self._read = read
        self._rest = rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._read:
            yield piece
        if self._rest is not None:
            async for piece in self._rest:
                yield piece

    async def aclose(self) -> None:
        await self._upstream.aclose()


def _replayed(
    upstream: httpx.Response, read: list[bytes], rest: AsyncIterator[bytes] | None
) -> httpx.Response:
    response = httpx.Response(
        upstream.status_code,
        headers=upstream.headers,
        stream=_Replay(upstream, read, rest),
        request=upstream.request,
        extensions=upstream.extensions,
    )
    return response
