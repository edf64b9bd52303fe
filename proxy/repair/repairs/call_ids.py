"""Tool-call ids that are unique across the whole conversation."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from proxy.repair.calls.ids import generated_call_id, id_digest, next_numbered_id
from proxy.repair.chunks import choice_index, choices_of
from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally
from proxy.wire.json_shapes import objects_in

_VALID_ID = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
_NINE_ALNUM = re.compile(r"[A-Za-z0-9]{9}")


class ReusedCallIdRepair(Link):
    """Kimi numbers calls per round, so round two reuses `functions.search_web:0`. Open WebUI
    then suppresses the new round's calls but stores their results, and every later request is
    rejected. An id that collides with one in the request's history, or earlier in the same
    response, is rewritten: deterministically (a retried request gets the same ids), unique in
    the conversation, at most 40 characters, keeping Kimi's `functions.NAME:N` shape with the
    next unused N. Ids that do not collide are never touched.
    Transcript: `kimi_per_round_ids` (tests/transcripts, as round two of a conversation);
    recording: `kimi_reused_ids_round2`.
    """

    def __init__(self, forwarded: Forwarded, tally: Tally) -> None:
        self._forwarded = forwarded
        self._tally = tally
        self._taken: set[str] | None = None
        self._renamed: dict[tuple[int, int], str] = {}  # (choice, call index) -> new id

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            entries = objects_in(delta.get("tool_calls")) if isinstance(delta, dict) else []
            for entry in entries:
                if isinstance(entry.get("id"), str):
                    where = (choice_index(choice), entry.get("index", 0))
                    changed |= self._rename(entry, where)
        return [chunk] if changed else None

    def _rename(self, call: dict[str, Any], where: tuple[int, int]) -> bool:
        taken = self._history_ids()
        original = call["id"]
        if where in self._renamed:
            new = self._renamed[where]
        elif original in taken:
            new = self._fresh(original, where, taken)
            self._renamed[where] = new
            self._tally.note("call_id_reused", "%r -> %r", original, new)
        else:
            taken.add(original)
            return False
        call["id"] = new
        return True

    def _fresh(self, original: str, where: tuple[int, int], taken: set[str]) -> str:
        numbered = next_numbered_id(original, taken)
        if numbered and _VALID_ID.fullmatch(numbered) and numbered not in taken:
            taken.add(numbered)
            return numbered
        # Mistral's servers take only ids of exactly nine alphanumerics: a nine-alphanumeric id
        # is renamed to another (hex digits are alphanumerics), any other to call_<24 hex>.
        nine = _NINE_ALNUM.fullmatch(original) is not None
        attempt = 0
        while (candidate := self._candidate(nine, original, len(taken), where, attempt)) in taken:
            attempt += 1
        taken.add(candidate)
        return candidate

    @staticmethod
    def _candidate(
        nine: bool, original: str, known: int, where: tuple[int, int], attempt: int
    ) -> str:
        if nine:
            return id_digest(original, known, *where, attempt)[:9]
        return generated_call_id(original, known, *where, attempt)

    def _history_ids(self) -> set[str]:
        if self._taken is None:
            self._taken = set(_ids_in(self._forwarded.body.get("messages")))
        return self._taken


def _ids_in(messages: Any) -> Iterable[str]:
    for message in objects_in(messages):
        if isinstance(message.get("tool_call_id"), str):
            yield message["tool_call_id"]
        for call in objects_in(message.get("tool_calls")):
            if isinstance(call.get("id"), str):
                yield call["id"]
