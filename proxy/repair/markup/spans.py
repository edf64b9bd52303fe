"""The contract between the streaming recogniser and the markup families it knows.

A family describes one model family's tool-call markup as data and three pure functions over
the text of one span (from the first character of its opener): where its first call's name is,
where the span ends, and the calls in a complete span. The recogniser (`recogniser.py`) owns
everything about streaming, holding back, fences and safety; a family never sees a chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


class RefusedSpan:
    """`MarkupFamily.name` says: this span is not (or no longer can be) this family's markup.
    Its one value is REFUSED, compared by identity; the type is named in the signatures of the
    families' readers (families/reading.py)."""

    def __repr__(self) -> str:
        return "REFUSED"


REFUSED = RefusedSpan()


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: Any
    """The decoded arguments (a dict for every family that writes JSON)."""
    strings: bool = False
    """True when the family writes every argument value as bare text (Qwen3-Coder, GLM,
    MiniMax): the values are then converted by the tool's schema, never guessed."""
    unwrap: bool = False
    """The family's servers unwrap a lone `arguments` or `input` parameter that wraps the real
    arguments when the schema declares no such property (DeepSeek V3.2's DSML): see
    `DeclaredTools.unwrapped`."""
    id: str | None = None
    """The call id the model wrote itself (Kimi's `functions.NAME:N`, Mistral's `[CALL_ID]`);
    kept, because that family's chat template renders it back in the next request."""


class MarkupFamily:
    """One family's tool-call markup. Subclasses set the class attributes and the three hooks."""

    family: ClassVar[str] = ""
    """Short name, as counted and logged (`hermes`, `kimi_k2`, …)."""
    openers: ClassVar[tuple[str, ...]] = ()
    """Literal texts that open a span. Several families may share one (`<tool_call>`): each
    is asked, and the first to name a call wins."""
    at_start_only: ClassVar[bool] = False
    """The span must begin the content (after leading whitespace): Llama's bare JSON and the
    pythonic list are otherwise ordinary text."""

    def call_id(self, digest: str) -> str:
        """The id for a call the model wrote none for, from a hex `digest` of the exchange:
        `call_<24 hex>`, unless the family's server holds ids to a shape of its own."""
        return f"call_{digest[:24]}"

    def name(self, span: str, opener: str) -> str | RefusedSpan | None:
        """The first call's name once `span` shows it whole; None while it may still come;
        REFUSED as soon as `span` cannot be this family's markup."""
        raise NotImplementedError

    def end(self, span: str, opener: str, final: bool) -> int | None:
        """The length of the complete span within `span`, or None while it may still grow.
        `final`: the stream ended cleanly, no more text will come (a family whose markup has
        no closing marker, or whose model may stop before writing it, ends the span here)."""
        raise NotImplementedError

    def calls(self, span: str, opener: str) -> list[ParsedCall] | None:
        """The calls written in the complete span `span[:end]`, or None when it does not parse."""
        raise NotImplementedError
