"""Phases that say which repair made each change and what the answer machine did with each
upstream event: used by `streamfix explain` only, through the app's `phases_factory`, so the
exchange runs on the server's own runner, doors and answer machine.

The request repairs are watched one by one (a label per repair that changed the body), the
stream links through an `AttributingChain` (attribution.py), and phase two's machine records
each event and the end it decided (answer_record.py).
"""

from __future__ import annotations

from typing import Any

from proxy.explain.answer_record import AnswerRecord, RecordingMachine
from proxy.explain.attribution import AttributingChain, Attribution, BodyChange, Label, copied
from proxy.explain.diff import field_changes
from proxy.repair.forwarded import Forwarded
from proxy.repair.phases import Phases
from proxy.repair.repairs import stream_links
from proxy.repair.request_phase import RequestContext, RequestRepair, request_phase
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope


class _WatchedRequest(RequestRepair):
    """Runs one request repair and labels what it did to the body."""

    def __init__(self, repair: RequestRepair, attribution: Attribution) -> None:
        self.inner = repair
        self._attribution = attribution

    @property
    def name(self) -> str:
        return self.inner.name  # the failing repair's own name in the log, not the watcher's

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        attribution = self._attribution
        before, original = attribution.snapshot(), copied(body)
        try:
            changed = await self.inner.apply(body, context)
        except Exception as exc:
            label = Label(
                self.name, attribution.kinds_since(before), f"failed: {type(exc).__name__}"
            )
            attribution.body_labels.append(label)
            raise
        kinds = attribution.kinds_since(before)
        changes = field_changes(original, copied(body))
        if changed or kinds or changes:
            label = Label(self.name, kinds, "changed" if changed else "", changes)
            attribution.body_labels.append(label)
        return changed


class AttributingPhases(Phases):
    """`Phases` whose request repairs and links are watched and whose machine records: one
    `Attribution` per exchange (`attributions`, in the order the exchanges came), and the
    record of its answer (`answer_of`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attributions: list[Attribution] = []
        self._by_tally: dict[int, Attribution] = {}
        self._answers: dict[int, AnswerRecord] = {}

    async def request(
        self, body: dict[str, Any], rules: RouteRules, scope: ReceiptScope, tally: Tally
    ) -> tuple[Forwarded, bool]:
        attribution = Attribution(tally)
        self.attributions.append(attribution)
        self._by_tally[id(tally)] = attribution
        watched = [_WatchedRequest(repair, attribution) for repair in self.request_repairs]
        attribution.request = BodyChange(copied(body))
        forwarded, changed = await request_phase(
            body, rules, scope, tally, watched, strict=self.options.strict
        )
        attribution.request.after, attribution.request.labels = (
            copied(body),
            attribution.body_labels,
        )
        return forwarded, changed

    def stream(self, forwarded: Forwarded, tally: Tally) -> AttributingChain:
        attribution = self._by_tally.get(id(tally)) or Attribution(tally)
        links = stream_links(self.options, forwarded, tally, self.store)
        return AttributingChain(links, attribution, strict=self.options.strict)

    def answer(
        self, forwarded: Forwarded, tally: Tally, max_event_bytes: int | None
    ) -> RecordingMachine:
        record = self._answers[id(tally)] = AnswerRecord()
        return RecordingMachine(self.stream(forwarded, tally), tally, max_event_bytes, record)

    def answer_of(self, attribution: Attribution) -> AnswerRecord | None:
        """The record of the answer to the exchange `attribution` is of; None when no answer
        went through the machine (refused, or relayed as received)."""
        return self._answers.get(id(attribution.tally))
