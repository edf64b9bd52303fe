"""The markup families the recogniser knows (placeholder: Hermes only, until the full set)."""

from __future__ import annotations

import re

import orjson

from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall

_JSON_NAME = re.compile(r'\{\s*"name"\s*:\s*"([^"\\]+)"')


class Hermes(MarkupFamily):
    """Hermes and Qwen 2.5/3: `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`."""

    family = "hermes"
    openers = ("<tool_call>",)
    closer = "</tool_call>"

    def name(self, span: str, opener: str):  # type: ignore[override]
        body = span[len(opener) :].lstrip()
        if not body:
            return None
        if not body.startswith("{"):
            return REFUSED
        match = _JSON_NAME.match(body)
        return match.group(1) if match else None

    def end(self, span: str, opener: str, final: bool) -> int | None:
        index = span.find(self.closer, len(opener))
        return None if index < 0 else index + len(self.closer)

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        body = span[len(opener) : -len(self.closer)].strip()
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        return [ParsedCall(value["name"], value.get("arguments", {}))]


FAMILIES: tuple[MarkupFamily, ...] = (Hermes(),)
