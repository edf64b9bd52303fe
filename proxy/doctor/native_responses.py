"""Whether the upstream also offers OpenAI's Responses API natively (`POST <base>/responses`),
asked without spending a token, and what the report says about it.

The probe is a body a Responses endpoint parses and refuses before generating anything: `input`
of the wrong type (a number). OpenAI answers such a body 400 `invalid_request_error` with
`param: "input"` ("Invalid type for 'input': expected …, but got … instead."), LM Studio and
LiteLLM the same, vLLM and other FastAPI servers a 400 or 422 whose validation errors name
`input`. A server without the endpoint answers 404 or 405. The verdict is read from the wire,
never from the host's name:

- 400/422 naming `input`: offered (it read the body as a Responses request);
- 404/405/501 not about the model: not offered; a 404 saying the model does not exist is an
  endpoint that read the body, so offered;
- 2xx: offered (and it generated: the probe asks for the fewest tokens OpenAI allows);
- anything else (a key refused, a 5xx, no answer): not known, said as it came.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

from proxy.doctor.probe import Limits, send, upstream_body, upstream_text
from proxy.learning.error_messages import error_messages
from proxy.wire import json_codec

MIN_OUTPUT_TOKENS = 16
"""OpenAI's least `max_output_tokens`: the bound should a server take the probe after all."""
_NAMES_INPUT = re.compile(r"(?<![\w.])['\"`]?input['\"`]?(?![\w])")
_ABOUT_MODEL = re.compile(r"model_not_found|\bmodel\b", re.IGNORECASE)
WHY_BRIDGED = (
    "streamfix's Responses front bridges to chat completions instead (bypassing it): its "
    "repairs work on the chat stream, and every receipt (signatures, reasoning) travels the "
    "same way for every client and every upstream"
)


def probe_body(model: str) -> dict[str, Any]:
    return {"model": model, "input": 0, "max_output_tokens": MIN_OUTPUT_TOKENS, "store": False}


@dataclass(frozen=True)
class NativeResponses:
    offered: bool | None
    """None: the answer does not tell."""
    status: int
    """The probe's HTTP status (0: no answer)."""
    said: str
    """What the answer said: the error's first message, or why there was none."""

    @property
    def note(self) -> str:
        answered = f"answered {self.status}" if self.status else "no answer"
        said = f": {_short(self.said)}" if self.said else ""
        if self.offered:
            return f"the upstream offers /v1/responses natively ({answered}{said}); {WHY_BRIDGED}."
        if self.offered is False:
            return (
                f"the upstream has no /v1/responses ({answered}); Responses clients such as "
                "Codex need streamfix's Responses front, which bridges to chat completions."
            )
        return f"could not tell whether the upstream offers /v1/responses ({answered}{said})."

    def as_json(self) -> dict[str, Any]:
        return {
            "offered": self.offered,
            "status": self.status,
            "said": self.said,
            "note": self.note,
        }


def judge(status: int, body: bytes) -> NativeResponses:
    """The verdict for the probe's answer (see the module docstring)."""
    text = body.decode("utf-8", "replace")
    messages = error_messages(text) if text.strip() else ()
    said = messages[0] if messages else ""
    if 200 <= status < 300:
        return NativeResponses(True, status, "it generated an answer")
    if status in (400, 422):
        naming = _names_input(text, messages)
        return NativeResponses(True if naming else None, status, said)
    if status in (404, 405, 501):
        about_model = status == 404 and any(_ABOUT_MODEL.search(m) for m in messages)
        return NativeResponses(about_model, status, said)
    return NativeResponses(None, status, said)


def _names_input(text: str, messages: tuple[str, ...]) -> bool:
    """Whether the refusal is about the probe's `input`: OpenAI's `param`, or a message (a
    validation error's place spelled `input…`) naming it."""
    if re.search(r'"param"\s*:\s*"input"', text):
        return True
    return any(_NAMES_INPUT.search(message) for message in messages)


async def probe(
    client: httpx.AsyncClient,
    base_url: str,
    headers: dict[str, str],
    model: str,
    limits: Limits,
) -> NativeResponses:
    """One POST of the probe to `<base_url>/responses`, judged."""
    cassette = await send(
        client, f"{base_url}/responses", headers, json_codec.dumps(probe_body(model)), limits
    )
    if cassette.status == 0:
        return NativeResponses(None, 0, upstream_body(cassette).decode())
    return judge(cassette.status, upstream_text(cassette))


def _short(text: str, limit: int = 120) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
