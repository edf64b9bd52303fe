"""Clients of a recording or replaying proxy: raw httpx and the OpenAI Python SDK asking for a
transcript's model (with the transcript's request fields) and the recordings/ corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai

from proxy.upstream.cassettes import Cassette
from tests.support.fake_upstream import (
    load_transcript,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
API_KEY = "sk-test-round-trip"
USER = [{"role": "user", "content": "go"}]


def sdk_fields(transcript: str) -> dict[str, Any]:
    """The transcript's request fields (tools, n, ...) as OpenAI SDK keyword arguments."""
    request = load_transcript(transcript).meta["request"]
    return {k: v for k, v in request.items() if v not in (None, [])}


def request_fields(transcript: str) -> dict[str, Any]:
    """The same fields as they appear in the request body."""
    fields = sdk_fields(transcript)
    return fields | fields.pop("extra_body", {})


def raw_stream(proxy: str, transcript: str) -> tuple[int, str, bytes]:
    body = {"model": transcript, "messages": USER, "stream": True, **request_fields(transcript)}
    headers = {"authorization": f"Bearer {API_KEY}"}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        return r.status_code, r.headers["content-type"], b"".join(r.iter_raw())


def sdk(proxy: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/v1", api_key=API_KEY, max_retries=0, timeout=30)


def sdk_create(proxy: str, transcript: str, messages: list[dict[str, Any]] = USER) -> Any:
    stream = sdk(proxy).chat.completions.create(
        model=transcript, messages=messages, stream=True, **sdk_fields(transcript)
    )
    with stream:
        return [chunk.model_dump() for chunk in stream]


def sdk_stream(proxy: str, transcript: str) -> Any:
    with sdk(proxy).chat.completions.stream(
        model=transcript, messages=USER, **sdk_fields(transcript)
    ) as stream:
        events = [event.type for event in stream]
        return events, stream.get_final_completion().model_dump()


def upstream_bytes(cassette: Cassette) -> bytes:
    """The upstream's body, as the replay transport streams it: the recorded chunks."""
    return b"".join(chunk.data for chunk in cassette.chunks)
