"""The client-rule checker (proxy/repair/conformance.py `violations`), used by the tests, by
`streamfix replay` and by bench/corpus.py: what it asks of a stream, and that the repairs meet
it."""

from __future__ import annotations

from proxy.repair.conformance import violations
from tests.support.streams import repair_stream, sse

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_the_checker_wants_the_role_on_the_first_delta() -> None:
    # GLM through Mistral's API never sends a role: the OpenAI SDK's stream helper then ends
    # with message.role None. The checker (tests, `streamfix replay`, bench/corpus.py) says so.
    body = sse(chunk({"content": "a"}), chunk({}, "stop"), "[DONE]")
    assert "chunk 0: choice 0: the first delta carries no role" in violations(body)
    assert violations(repair_stream(body)) == []
