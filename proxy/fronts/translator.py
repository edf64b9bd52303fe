"""What every front's events translator offers the server's runner (server/front_exchange.py),
and how a repaired chat stream can end.

A translator is pure: fed the repaired chat chunks one at a time (the chain's own objects,
decoded once from the upstream's bytes), it returns encoded events. The runner sends `start()`
at once, `feed(chunk)` for every repaired chunk, `heartbeat()` while the upstream is silent,
then `settle(end)`, keeps the turn (`turn()`) and only then sends `terminal()`: a client fires
its next request the moment the terminal event arrives, and that request may carry the token
naming the turn. `counts` is what the translation itself did, booked on the exchange.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.repair.answer_ends import CLEAN, Aborted, Clean, End, UpstreamError

Chunk = dict[str, Any]
Message = dict[str, Any]


# How an answer ends is the answer machine's (repair/answer.py): the translators render it.
__all__ = ["CLEAN", "Aborted", "Clean", "End", "Refused", "Translator", "UpstreamError"]


class Refused(Exception):
    """A request a front refuses before anything goes upstream: the HTTP status and the error
    body in the front's own shape."""

    def __init__(self, message: str, status: int, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class Translator(Protocol):
    """One answer's events, in the front's own protocol."""

    counts: dict[str, int]

    @property
    def answer_id(self) -> str:
        """The answer's id in the front's protocol (`resp_…`, `msg_…`): its turn's name."""
        ...

    def start(self) -> list[bytes]: ...

    def feed(self, chunk: Chunk) -> list[bytes]: ...

    def heartbeat(self) -> list[bytes]:
        """An event that keeps the client's idle timer alive and says nothing else."""
        ...

    def settle(self, end: End) -> list[bytes]:
        """Everything up to the terminal event: open blocks or items closed, the status set."""
        ...

    def terminal(self) -> list[bytes]: ...

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed (repaired) chat completion as the front's whole answer object."""
        ...

    def turn(self) -> Message | None:
        """The repaired assistant message, receipts attached, to keep under the token this
        answer carries; None when the answer carries none or did not end cleanly."""
        ...
