"""Content parts an upstream refuses that no repair can stand in for: learned from the refusal
like a request rule (proxy/learning/refusals.py), remembered per upstream and model, but never
sent again without the part. Going without it would answer another question (a PDF nobody
read), so the client is answered a 400 that names the part and what to do, and the next
request carrying one is answered the same at once, without going upstream.

Each is data (`REFUSED_PARTS`): the chat part type, the statuses and texts of the refusal, each
quoting its public report, as `error_messages` reads them out of any upstream's error shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.learning.error_messages import error_messages
from proxy.learning.request_rule import Request
from proxy.repair.rules import RouteRules
from proxy.wire.json_shapes import objects_in

FILE_PARTS_LEARNED_KIND = "file_parts_learned"
FILE_PARTS_REFUSED_KIND = "file_parts_refused"


@dataclass(frozen=True, slots=True)
class RefusedPart:
    """One kind of content part an upstream refuses for a model, and the refusal that says so."""

    part_type: str
    """The chat content part's `type` (`file`)."""
    kind: str
    """Counted and logged when the refusal is learned."""
    refused_kind: str
    """Counted on each later request answered at once."""
    statuses: frozenset[int]
    said: tuple[re.Pattern[str], ...]
    """The refusal's texts: any one, in a message of the error body, says the part is refused."""
    remembers = True
    """A part refused is refused for the upstream and model: remembered, never resent."""

    @property
    def memory_key(self) -> str:
        """What is remembered per upstream and model (a `:`, as no parameter name has)."""
        return f"refused:{self.part_type}_parts"

    @property
    def done(self) -> str:
        return (
            f"refusing `{self.part_type}` content parts (%s); the client was answered 400, and "
            "a request with one is answered so up front for this upstream and model"
        )

    def places(self, request: Request) -> list[str]:
        """Where the request holds such parts, as chat names them (`messages[1].content[0]`)."""
        out = []
        for at, message in enumerate(objects_in(request.get("messages"))):
            for index, part in enumerate(objects_in(message.get("content"))):
                if part.get("type") == self.part_type:
                    out.append(f"messages[{at}].content[{index}]")
        return out

    def carries(self, request: Request) -> bool:
        """Whether a message holds such a part (every request's recall asks: one plain loop)."""
        part_type = self.part_type
        messages = request.get("messages")
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") == part_type:
                        return True
        return False

    def says(self, error: str) -> bool:
        messages = error_messages(error)
        return any(pattern.search(message) for message in messages for pattern in self.said)

    def detect(self, error: str, request: Request) -> tuple[str, ...]:
        return (self.memory_key,) if self.carries(request) and self.says(error) else ()

    def learns(self, rules: RouteRules) -> bool:
        """Always: no key says otherwise, and what it learns changes nothing that goes up."""
        return True

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        """Never: the request is not sent again (the seam answers the refusal as it stands)."""
        return False

    def candidates(self, request: Request) -> list[str]:
        return [self.memory_key] if self.carries(request) else []

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        """Nothing to adjust: the request is answered before any repair runs."""
        return rules

    def message(
        self,
        places: list[str],
        model: object,
        said: str | None,
        block: str = "",
        instead: str = "",
    ) -> str:
        """The 400's words: where the parts are, that this upstream refuses them for this
        model (in its own words when it just said so), and what to do instead. `block` names
        what the client sent that became such a part (a front's `document` block); "" when
        the client sent the part itself. `instead` names the front's text alternative."""
        where = ", ".join(places) or "the request"
        why = (
            f"it answered: {said}"
            if said is not None
            else "it refused one before; nothing was sent upstream this time"
        )
        kind = f"`{self.part_type}` content part"
        refused = (
            f"{block} goes to a chat upstream as a {kind}, which this upstream refuses"
            if block
            else f"this upstream refuses a {kind}"
        )
        text = instead or ("a `text` document or a text block" if block else "a text part")
        return (
            f"{where}: {refused} for model {str(model)!r} ({why}). Send the document's text "
            f"instead ({text}), or use a model that reads PDFs."
        )


FILE_PARTS = RefusedPart(
    "file",
    FILE_PARTS_LEARNED_KIND,
    FILE_PARTS_REFUSED_KIND,
    frozenset({400, 422}),
    (
        # DeepSeek: "Failed to deserialize the JSON body into the target type: messages[1]:
        # unknown variant `file`, expected `text` at line 1 column 1034"
        # (zotero-AI-Butler#316).
        re.compile(r"unknown variant `file`, expected"),
        # vLLM: "Unsupported chat content part type: 'file'. Supported types: audio_embeds, …"
        # (chat_utils.py, a 400 with param "type"); before, "Unknown part type: file"
        # (openwiki#63).
        re.compile(r"Unsupported chat content part type: '?file\b"),
        re.compile(r"Unknown part type: file\b"),
    ),
)

REFUSED_PARTS: tuple[RefusedPart, ...] = (FILE_PARTS,)
"""Every part refusal learned, in the order they are tried (after the request rules)."""
