"""The one delivery decision (proxy/server/delivery_mode.py) the app, `explain` and `replay`
share: refused, relayed, repaired SSE, repaired JSON or an SSE answer folded into one body, and
when an encoding leaves an answer unrepaired."""

from __future__ import annotations

import pytest

from proxy.server.delivery_mode import Delivery, Mode, delivery_mode

SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"


@pytest.mark.parametrize(
    ("status", "stream", "content_type", "encoding", "expected"),
    [
        (200, True, SSE, "", Delivery(Mode.SSE)),
        (200, True, SSE, "gzip", Delivery(Mode.SSE)),
        (200, False, JSON, "", Delivery(Mode.JSON)),
        (200, False, JSON, " Deflate ", Delivery(Mode.JSON)),
        (200, False, "text/plain", "", Delivery(Mode.JSON)),  # read, and passed on if not JSON
        (200, True, JSON, "", Delivery(Mode.RELAY)),  # a stream asked, a body answered
        (200, False, SSE, "", Delivery(Mode.FOLD)),  # one body asked, a stream answered
        (200, False, SSE, "gzip", Delivery(Mode.FOLD)),
        (400, True, SSE, "", Delivery(Mode.REFUSED)),  # errors are the upstream's to say
        (422, False, JSON, "br", Delivery(Mode.REFUSED)),  # ...in whatever encoding
        (500, False, JSON, "", Delivery(Mode.REFUSED)),
        (200, True, SSE, "br", Delivery(Mode.REFUSED, "br")),
        (200, False, JSON, "zstd", Delivery(Mode.REFUSED, "zstd")),
        (200, True, JSON, "gzip, br", Delivery(Mode.REFUSED, "gzip, br")),
    ],
)
def test_the_delivery_of_an_answer(
    status: int, stream: bool, content_type: str, encoding: str, expected: Delivery
) -> None:
    assert delivery_mode(status, stream, content_type, encoding) == expected


def test_a_front_renders_a_streamed_requests_whole_answer_itself() -> None:
    # A front's client asked for its own events: a body answered is rendered as them.
    decided = delivery_mode(200, True, JSON, "", relays_unframed_streams=False)
    assert decided == Delivery(Mode.JSON)


def test_the_modes_read_as_explain_names_them() -> None:
    assert [mode.value for mode in Mode] == ["refused", "relayed", "stream", "json", "folded"]
