"""Tool-call ids mapped to exactly nine alphanumerics, for Mistral."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from proxy.wire.json_shapes import objects_in

CALL_ID_MAPPED_KIND = "tool_call_id_mapped"

NINE_ALNUM = re.compile(r"[A-Za-z0-9]{9}")
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def nine_alnum(original: str, salt: int = 0) -> str:
    """Nine alphanumerics from the id itself: its SHA-256 in base 62. The same id gives the same
    result in every request, so a conversation's history reads the same on every turn."""
    seed = original if salt == 0 else f"{original}#{salt}"
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big")
    out = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        out.append(_ALPHABET[digit])
    return "".join(out)


class NineAlnumCallIds:
    """Mistral rejects a request whose history holds a call id that is not exactly nine
    alphanumerics: 400 `Tool call id was call_0fypS1hVX but must be a-z, A-Z, 0-9, with a
    length of 9.` (magentic#276, gptel#1203, ironclaw#1241 with `"type":"invalid_function_call",
    "code":"3280"`). A conversation begun on OpenAI (`call_…`), Anthropic (`toolu_…`) or a local
    server therefore cannot continue on Mistral; langchain maps such ids on the way up
    (langchain#24668), and so does this. Each id that is not nine alphanumerics is replaced, on
    the assistant's `tool_calls[].id` and on the `tool` message's `tool_call_id` alike, by
    `nine_alnum(id)`: derived from the id, so the client, which keeps its own ids, sends the
    same history and gets the same mapping on every later turn. Collisions: an id already nine
    alphanumerics (Mistral's own) is never changed, and a derived id equal to one of those or
    to another id's mapping takes the next salt (`id#1`, `id#2`, …) instead, so no two ids of
    one request ever share a mapped id. (A collision needs two of 62^9 ≈ 1.4e16 values.)
    Mistral's new ids in its answers are nine alphanumerics already and reach the client as
    sent."""

    KIND = CALL_ID_MAPPED_KIND

    def apply(self, messages: list[Any]) -> int:
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        order: list[str] = []
        for message in objects_in(messages):
            if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
                results.append(message)
                order.append(message["tool_call_id"])
            for call in objects_in(message.get("tool_calls")):
                if isinstance(call.get("id"), str):
                    calls.append(call)
                    order.append(call["id"])
        mapping = _mapping(order)
        if not mapping:
            return 0
        for call in calls:
            call["id"] = mapping.get(call["id"], call["id"])
        for result in results:
            result["tool_call_id"] = mapping.get(result["tool_call_id"], result["tool_call_id"])
        return len(mapping)


def _mapping(ids: list[str]) -> dict[str, str]:
    """Every id that needs one, in order of appearance, to its nine alphanumerics."""
    taken = {one for one in ids if NINE_ALNUM.fullmatch(one)}
    mapping: dict[str, str] = {}
    for original in ids:
        if original in taken or original in mapping:
            continue
        salt = 0
        mapped = nine_alnum(original)
        while mapped in taken:
            salt += 1
            mapped = nine_alnum(original, salt)
        taken.add(mapped)
        mapping[original] = mapped
    return mapping
