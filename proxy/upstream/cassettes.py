"""The cassette: one recorded exchange, as diff-friendly JSON.

A cassette keeps the request as it went upstream (credentials removed), the upstream's status,
headers and body as the raw byte chunks it arrived in, with their arrival times, and the bytes
the client was sent; for a front client (Responses, Messages) also the client's own request and
what its translation counted (client_requests.py). Chunks are text where they are valid UTF-8
(one JSON string per chunk, so a diff shows which event changed) and base64 where a chunk
boundary split a character.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from proxy.repair.profiles import PROFILES
from proxy.upstream.client_requests import ClientRequest
from proxy.wire import json_codec
from proxy.wire.credentials import CREDENTIAL_HEADERS, CREDENTIAL_PARAMETERS
from proxy.wire.json_paths import Path as FieldPath
from proxy.wire.json_paths import get_path, remove_path
from proxy.wire.json_shapes import objects_in

FORMAT = "streamfix-cassette/1"

# Never written to a cassette, whatever the configuration says.
SECRET_HEADERS = frozenset({*CREDENTIAL_HEADERS, "proxy-authorization", "cookie", "set-cookie"})
# Per-connection or per-run noise that would make every re-recording a diff.
NOISY_HEADERS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "date", "x-request-id"}
)
SECRET_QUERY = CREDENTIAL_PARAMETERS  # Google's `?key=` and the like

# Request fields left out of the match: clients vary them between runs of the same request.
VOLATILE_FIELDS = ("user", "metadata", "store", "prompt_cache_key", "safety_identifier")


@dataclass(frozen=True)
class ProxyWrittenFields:
    """Where, in a request's messages, the receipt repair writes or removes fields depending on
    what its store holds: the same client request goes upstream with a receipt (the turn was
    seen), Google's placeholder (a fresh store), without it, or with foreign metadata stripped
    (an upstream not yet seen issuing it). The match leaves these out, so a cassette replays
    the same alone, in any order and in parallel workers, each with its own store."""

    on_calls: tuple[FieldPath, ...]
    """Receipts and placeholders on an assistant message's tool calls."""
    on_assistant: tuple[FieldPath, ...]
    """Receipts on the assistant message itself (tool-calling and text turns)."""
    foreign: tuple[FieldPath, ...]
    """Metadata stripped from any message and its calls for upstreams that must not get it."""


@cache
def proxy_written_fields() -> ProxyWrittenFields:
    """Read from the profiles, the single place receipt paths are data, so a provider added
    there is left out of the match here too."""
    calls: set[FieldPath] = set()
    assistant: set[FieldPath] = set()
    foreign: set[FieldPath] = set()
    for profile in PROFILES.values():
        for rule in profile.receipts:
            (calls if rule.on == "call" else assistant).add(rule.path)
        if profile.first_call_placeholder is not None:
            calls.add(profile.first_call_placeholder.path)
        foreign.update(profile.foreign_metadata)
    return ProxyWrittenFields(
        tuple(sorted(calls)), tuple(sorted(assistant)), tuple(sorted(foreign))
    )


@dataclass
class Chunk:
    at: float
    """Seconds since the upstream's response headers arrived."""
    data: bytes

    def to_json(self) -> dict[str, Any]:
        try:
            return {"at": round(self.at, 6), "text": self.data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"at": round(self.at, 6), "base64": base64.b64encode(self.data).decode()}

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Chunk:
        if "text" in item:
            return cls(item["at"], item["text"].encode("utf-8"))
        return cls(item["at"], base64.b64decode(item["base64"]))


@dataclass
class Cassette:
    method: str
    path: str
    """Relative to the upstream base URL, e.g. `chat/completions`."""
    query: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)
    client_body: bytes = b""
    upstream_base_url: str = ""
    """The upstream it was recorded against (credentials removed)."""
    profile: str = ""
    """The provider profile that applied when it was recorded."""
    client_request: ClientRequest | None = None
    """A front client's own request (Responses, Messages), when one was translated into this
    chat request; None for a chat client, or a cassette recorded before it was kept."""
    file: Path | None = None

    @property
    def body_json(self) -> Any:
        try:
            return json_codec.loads(self.request_body)
        except json_codec.JSONDecodeError:
            return None

    def key(self) -> str:
        """What a replayed request must match (receipts the proxy writes left out)."""
        return request_key(self.method, self.path, self.request_body)

    def exact_key(self) -> str:
        """The same, receipts included: preferred when several cassettes match."""
        return request_key(self.method, self.path, self.request_body, exact=True)

    def to_json(self) -> bytes:
        body = self.body_json
        request: dict[str, Any] = {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.request_headers,
        }
        if body is not None:
            request["body"] = body
        else:
            request["body_text"] = self.request_body.decode("utf-8", "replace")
        document: dict[str, Any] = {"format": FORMAT, "request": request}
        if self.client_request is not None:
            document["client_request"] = self.client_request.to_json()
        document |= {
            "upstream": {
                "base_url": self.upstream_base_url,
                "profile": self.profile,
                "status": self.status,
                "headers": self.response_headers,
                "chunks": [chunk.to_json() for chunk in self.chunks],
            },
            "client": {"lines": self.client_body.decode("utf-8", "replace").split("\n")},
        }
        return json_codec.dumps_indented(document) + b"\n"

    @classmethod
    def load(cls, path: Path) -> Cassette:
        document = json_codec.loads(path.read_bytes())
        if document.get("format") != FORMAT:
            raise ValueError(f"{path}: not a {FORMAT} file")
        request, upstream = document["request"], document["upstream"]
        if "body" in request:
            body = json_codec.dumps(request["body"])
        else:
            body = request.get("body_text", "").encode()
        return cls(
            method=request["method"],
            path=request["path"],
            query=request.get("query", ""),
            request_headers=request.get("headers", {}),
            request_body=body,
            status=upstream["status"],
            response_headers=upstream.get("headers", {}),
            chunks=[Chunk.from_json(item) for item in upstream["chunks"]],
            client_body="\n".join(document["client"]["lines"]).encode(),
            upstream_base_url=upstream.get("base_url", ""),
            profile=upstream.get("profile", ""),
            client_request=(
                ClientRequest.from_json(document["client_request"])
                if isinstance(document.get("client_request"), dict)
                else None
            ),
            file=path,
        )

    def save(self, path: Path) -> None:
        path.write_bytes(self.to_json())
        self.file = path


def canonical_request(method: str, path: str, body: bytes, exact: bool = False) -> bytes:
    """What identifies a request for replay: method, path and body minus volatile fields and,
    unless `exact`, minus the fields the proxy's receipt repair writes (`ProxyWrittenFields`)."""
    try:
        parsed: Any = json_codec.loads(body) if body else None
    except json_codec.JSONDecodeError:
        parsed = body.decode("utf-8", "replace")
    if isinstance(parsed, dict):
        parsed = {k: v for k, v in parsed.items() if k not in VOLATILE_FIELDS}
        if not exact:
            without_proxy_written(parsed.get("messages"))
    return json_codec.dumps_sorted(
        {"method": method.upper(), "path": path.strip("/"), "body": parsed}
    )


def without_proxy_written(messages: Any) -> None:
    """Remove, in place, every field the receipt repair may have written or stripped, and the
    objects that leaves empty (the repair creates `extra_content: {"google": …}` to hold a
    signature). Only there: the same path elsewhere (a user message, the tools) still counts."""
    if not isinstance(messages, list):
        return
    fields = proxy_written_fields()
    for message in messages:
        if not isinstance(message, dict):
            continue
        calls = objects_in(message.get("tool_calls"))
        assistant = message.get("role") == "assistant"
        for path in fields.foreign + (fields.on_assistant if assistant else ()):
            _remove(message, path)
        for call in calls:
            for path in fields.foreign + (fields.on_calls if assistant else ()):
                _remove(call, path)


def _remove(target: dict[str, Any], path: FieldPath) -> None:
    """`path` and the holders it leaves empty, or that were `null` or `{}` to begin with: the
    repair writes a receipt into those, so a client's empty `extra_content` and none at all
    must compare alike after it did."""
    remove_path(target, path)
    for end in range(len(path) - 1, 0, -1):
        prefix = path[:end]
        holder = get_path(target, prefix)
        if holder is None or holder == {}:
            remove_path(target, prefix)


def request_key(method: str, path: str, body: bytes, exact: bool = False) -> str:
    return hashlib.sha256(canonical_request(method, path, body, exact)).hexdigest()


def safe_headers(headers: Any, secret: frozenset[str] = frozenset()) -> dict[str, str]:
    drop = SECRET_HEADERS | NOISY_HEADERS | secret
    return {name.lower(): value for name, value in headers.items() if name.lower() not in drop}


def safe_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, v) for k, v in pairs if k.lower() not in SECRET_QUERY])


def file_name(sequence: int, cassette: Cassette) -> str:
    """`0007-gemini-3-flash-preview-stream-200.json`: a listing reads as a log."""
    body = cassette.body_json if isinstance(cassette.body_json, dict) else {}
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", str(body.get("model") or cassette.path))[:60]
    mode = "stream" if body.get("stream") else "json"
    return f"{sequence:04d}-{model.strip('-')}-{mode}-{cassette.status}.json"
