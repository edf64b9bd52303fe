"""Today's repaired chat answer as a front would have sent it, for `streamfix replay` and
`streamfix explain` on a front's cassette.

Each front's replay module (responses/replay.py, messages/replay.py) reads what the recorded
answer minted (its id, item ids, receipt token) from the recorded client copy and primes its
translator with it; this module drives that translator the way the server does: `start()`,
one `feed` per repaired chat chunk, the end (clean, or the upstream's own error in its stream,
after which nothing is invented), or a whole body. Explain drives the same steps chunk by
chunk, so what it shows under each chat event adds up to `render`'s bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.fronts.translator import CLEAN, Translator, UpstreamError
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder

WholeEvents = Callable[[Translator, dict[str, Any]], list[bytes]]
"""A whole chat completion as the events of a streamed answer (an upstream that answered a
streamed request whole): each front says how (its door does the same)."""


def chat_object(data: str | bytes | None) -> dict[str, Any] | None:
    """A chat event's data or a chat body as a JSON object; None for anything else."""
    if not data:
        return None
    text = data if isinstance(data, bytes) else data.encode()
    if not text.startswith(b"{"):
        return None
    try:
        value = json_codec.loads(text)
    except json_codec.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def sse_data(raw: bytes) -> list[str | None]:
    """The data of every SSE event in `raw` (None for a comment-only event)."""
    decoder = SSEDecoder(len(raw) + 1)
    return [event.data for event in [*decoder.feed(raw), *decoder.flush()]]


@dataclass
class Rendering:
    translator: Translator
    streamed: bool
    """Whether the client was sent events (else one body)."""
    whole_events: WholeEvents
    ended: bool = field(default=False, init=False)
    """An upstream error in the chat stream ended the answer: later chunks render nothing."""

    def start(self) -> list[bytes]:
        return self.translator.start()

    def event(self, data: str | None) -> list[bytes]:
        """The front's events for one repaired chat event's data (none for `[DONE]` or a
        comment); an error chunk ends the answer with the front's error."""
        if self.ended:
            return []
        chunk = chat_object(data)
        if chunk is None:
            return []
        if chunk.get("error"):
            self.ended = True
            end = UpstreamError(chunk)
            return self.translator.settle(end) + self.translator.terminal()
        return self.translator.feed(chunk)

    def end(self) -> list[bytes]:
        """After the last chat event: the open blocks or items closed, the terminal event."""
        if self.ended:
            return []
        self.ended = True
        return self.translator.settle(CLEAN) + self.translator.terminal()

    def body(self, completion: dict[str, Any]) -> bytes:
        """A whole (repaired) chat completion as the front's body, encoded as the door does."""
        return json_codec.dumps(self.translator.whole(completion))

    def render(self, chat_output: bytes) -> bytes:
        """Today's chat answer (a stream, or a body) as the client would have been sent it."""
        completion = chat_object(chat_output)
        if not self.streamed:
            return chat_output if completion is None else self.body(completion)
        if completion is not None:  # a streamed request the upstream answered whole
            return b"".join(self.whole_events(self.translator, completion))
        out = self.start()
        for data in sse_data(chat_output):
            out += self.event(data)
        return b"".join(out + self.end())
