"""What a door renders an answer with: the answer machine's pieces (answer.py) in the door's
protocol, and the answer's end as the machine decided it. Each door has its own
(server/doors/); the one stream loop (server/answer_stream.py) drives any of them."""

from __future__ import annotations

from typing import Any, Protocol

from proxy.repair.answer_ends import End, Piece


class Rendering(Protocol):
    """One answer in a door's protocol, fed by the stream loop from the answer machine:
    `start()` at once, `pieces()` for what each upstream read completed, `heartbeat()` in the
    client's silences, then `settle(end, last)` with the last pieces, the turn kept (`turn()`),
    and only then `terminal()`: a client fires its next request the moment the terminal
    arrives, and that request may carry the token naming the turn."""

    @property
    def counts(self) -> dict[str, int]:
        """What the rendering itself did, booked on the exchange beside the repairs."""
        ...

    @property
    def relays_bytes(self) -> bool:
        """True for a door whose client speaks chat: after the upstream's own error it gets
        the upstream's remaining bytes as received; a door that renders its own end stops
        there."""
        ...

    @property
    def answer_id(self) -> str: ...

    def start(self) -> bytes: ...

    def pieces(self, pieces: list[Piece]) -> bytes:
        """The pieces in order, each rendered on its own: rendering a list is rendering each
        of its pieces in turn (`streamfix explain` renders them one upstream event at a
        time)."""
        ...

    def heartbeat(self) -> bytes:
        """What keeps the client's idle timer alive and says nothing else."""
        ...

    def settle(self, end: End, last: list[Piece]) -> bytes:
        """`last` as `pieces` renders it, then everything up to the terminal event."""
        ...

    def terminal(self) -> bytes: ...

    def turn(self) -> dict[str, Any] | None:
        """The repaired assistant message, receipts attached, to keep under the token this
        answer carries; None when it carries none or did not end cleanly."""
        ...
