"""The two phases of every exchange, for one configuration: what the server (and `explain`, and
any other front) calls.

1. `request`: the request repairs run on the client's body and end in a frozen `Forwarded`
   (request_phase.py);
2. `answer`: the answer machine (answer.py) over the stream links built from that value
   (`stream`), run over the answer, streamed or not (pipeline.py `RepairChain`, one_event.py),
   followed by the answer watch, which reads what the client gets for the exchange's span and
   token metrics (answer_watch.py).

The order of each phase's repairs, with its reasons, is in repairs/__init__.py.
"""

from __future__ import annotations

from typing import Any

from proxy.repair.answer import AnswerMachine
from proxy.repair.answer_watch import AnswerWatch
from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import RepairChain
from proxy.repair.repairs import ChainOptions, request_repairs, stream_links
from proxy.repair.request_phase import request_phase
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.store.protocol import Store


class Phases:
    def __init__(self, options: ChainOptions, store: Store) -> None:
        self.options = options
        self.store = store
        self.request_repairs = request_repairs(options, store)
        """Built once: a request repair keeps nothing between exchanges."""

    async def request(
        self, body: dict[str, Any], rules: RouteRules, scope: ReceiptScope, tally: Tally
    ) -> tuple[Forwarded, bool]:
        """Phase one on the client's `body` (edited in place): what goes upstream, and whether
        a repair changed it (else the client's own bytes go)."""
        return await request_phase(
            body, rules, scope, tally, self.request_repairs, strict=self.options.strict
        )

    def stream(self, forwarded: Forwarded, tally: Tally) -> RepairChain:
        """Phase two's chain for one exchange, built from what phase one decided, and the
        answer watch after it (with the repairs off too: usage is counted either way)."""
        links = stream_links(self.options, forwarded, tally, self.store)
        links.append(AnswerWatch(tally))
        return RepairChain(links, strict=self.options.strict)

    def answer(
        self, forwarded: Forwarded, tally: Tally, max_event_bytes: int | None
    ) -> AnswerMachine:
        """Phase two for one exchange: the answer machine over `stream`'s chain, its events
        bounded by `max_event_bytes`."""
        return AnswerMachine(self.stream(forwarded, tally), tally, max_event_bytes)
