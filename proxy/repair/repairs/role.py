"""`role` once per choice, on the first delta the client gets."""

from __future__ import annotations

from proxy.repair.chunks import choice_index, choices_of, says_nothing
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally

ROLE = "assistant"


class SingleRoleRepair(Link):
    """OpenAI sends `role: "assistant"` once, on a choice's first delta, and its SDK builds the
    message from what it accumulates: a role on every delta (Gemini, MiniMax, Z.AI) ends up as
    `"assistantassistant"`, a role that never comes (GLM through Mistral's API) or comes after
    the first delta leaves `message.role = None`. The second happens through the proxy itself
    when a delta carries the role together with a whole call and the finish (Gemini, xAI): the
    call goes out first, as a chunk of its own. So each choice's first delta the client
    receives carries the role, added when it does not (counted as `role_added`; a role the
    upstream sends later is then dropped as a repeat), and later deltas carry none. A chunk
    left with nothing but the repeated role (after the tool-call repair took its fragment)
    goes entirely: it would reach the client as an empty delta, one useless event per
    fragment. It runs after every repair that emits or reorders chunks, so "first" means first
    as the client sees it.
    Recordings: `gemini_indexless_call_stop`, `gemini_whole_call_with_role_and_finish`,
    `openai_call_role_finish_one_chunk`, `openai_no_role`.
    """

    stream_framing = True  # a non-streamed message carries its role as the upstream wrote it

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._started: set[int] = set()

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            index = choice_index(choice)
            if index in self._started:
                if "role" in delta:
                    del delta["role"]
                    self._tally.count("role_repeated_dropped")
                    changed = True
                continue
            self._started.add(index)
            role = delta.get("role")
            if not isinstance(role, str) or not role:
                delta["role"] = ROLE
                self._tally.count("role_added")
                changed = True
        if not changed:
            return None
        if says_nothing(chunk):
            self._tally.count("empty_event_dropped")
            return []
        return [chunk]
