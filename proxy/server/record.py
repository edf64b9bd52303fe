"""What the server keeps about one exchange while it runs: how it came in, when, its span, and
what a recorder wants a copy of. The repairs never see it; they count on the exchange's `Tally`,
which the record holds for the counts its log line and metrics give, beside the request phase's
`Forwarded` once there is one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proxy.learning.refused_parts import RefusedPart
from proxy.learning.token_ratios import TokenRatio
from proxy.repair.forwarded import Forwarded
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.upstream.context import ClientCopy

_UNROUTED_PROFILE = RouteRules().profile.name
"""What a log line names as the profile of an exchange no repair ran on."""


@dataclass(slots=True)
class ExchangeRecord:
    tally: Tally
    """What the repairs counted: its request id and counts."""
    route: str = "default"
    method: str = "POST"
    path: str = "/v1/chat/completions"
    """The client's method and (normalised) path, so a log line tells a chat from `/v1/models`."""
    model: object = None
    """The model the request names upstream (after a route's rename), when it named one."""
    provider: str = "-"
    """The route's GenAI provider (routing/provider_names.py), for spans and token metrics."""
    started: float = field(default_factory=time.monotonic)
    debug: bool = False
    """The client asked (`x-streamfix-debug: 1`) for the stream's repairs in an SSE comment."""
    forwarded: Forwarded | None = None
    """What the request phase decided (a chat exchange, once its request repairs ran)."""
    trace: Any = None
    """The exchange's OpenTelemetry spans while it runs, when tracing is on (server/tracing.py)."""
    door: str | None = None
    """The door the client came in at (`chat_completions`, `responses`, `messages`), None for
    a passthrough or a refusal before any door ran: `streamfix.front` on its span."""
    refused_part: RefusedPart | None = None
    """A content part the upstream just refused that no repair stands in for (learning/
    refused_parts.py): the door answers the refusal in its own words."""
    sent_bytes: int | None = None
    """The size of the body that last went upstream for this exchange."""
    sent_as_received: bool = False
    """The client's own bytes went up (a chat request nothing changed): not the proxy's compact
    JSON, so their size is no measure of the chat request's (token_ratios.py)."""
    tokens: TokenRatio | None = None
    """The upstream and model's input tokens per byte, as recalled before the send."""
    learns_tokens: bool = False
    """The exchange's door estimates input tokens (the Messages door): its answer's reported
    prompt tokens teach the ratio. Other doors neither read nor write it (no store round trip
    for what they do not use)."""
    client_copy: ClientCopy | None = None
    """What a recording transport handed back with the response (upstream/context.py
    `CLIENT_COPY`); delivery gives it every byte the client is sent, then saves it."""

    @property
    def request_id(self) -> str:
        return self.tally.request_id

    @property
    def profile(self) -> str:
        """The profile the repairs followed (the default one's name when none ran)."""
        return self.forwarded.rules.profile.name if self.forwarded else _UNROUTED_PROFILE

    def note(self, kind: str, message: str, *args: Any) -> None:
        self.tally.note(kind, message, *args)
