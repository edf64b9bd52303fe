"""A front client's own request, as a cassette keeps it beside the chat request it became.

A Responses or Messages client's request is translated into a chat request before anything
goes upstream; the cassette's `request` is that chat request. `streamfix explain` shows the
whole exchange as the client lived it, so a recording also keeps what the client sent (its
method, path, headers and body, credentials removed as from the upstream request) and what the
front's translation counted on the way. Optional: a chat client's cassette has none, and one
recorded before it was kept still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.wire import json_codec


@dataclass
class ClientRequest:
    method: str
    path: str
    """The client's path, as it asked the proxy (`/v1/responses`, `/v1/messages`)."""
    query: str
    headers: dict[str, str]
    """Credential-free: the same filter as the upstream request's headers."""
    body: bytes
    translation: dict[str, int] = field(default_factory=dict)
    """What the front's translation counted, by repair kind (`responses_*`, `messages_*`)."""

    @property
    def body_json(self) -> Any:
        try:
            return json_codec.loads(self.body)
        except json_codec.JSONDecodeError:
            return None

    def to_json(self) -> dict[str, Any]:
        body = self.body_json
        out: dict[str, Any] = {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
        }
        if body is not None:
            out["body"] = body
        else:
            out["body_text"] = self.body.decode("utf-8", "replace")
        out["translation"] = dict(sorted(self.translation.items()))
        return out

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> ClientRequest:
        if "body" in item:
            body = json_codec.dumps(item["body"])
        else:
            body = str(item.get("body_text", "")).encode()
        translation = item.get("translation") or {}
        return cls(
            method=str(item.get("method", "POST")),
            path=str(item.get("path", "")),
            query=str(item.get("query", "")),
            headers=dict(item.get("headers") or {}),
            body=body,
            translation={str(k): int(v) for k, v in translation.items()},
        )
