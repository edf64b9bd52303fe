"""The tool-call markup each model family writes, read from text the serving layer left as content.

One small class per family (the contract is `spans.MarkupFamily`): `name` reads the first call's
name as soon as it is whole and refuses as soon as the text cannot be the family's markup, `end`
says where the span stops, `calls` parses a complete span, strictly (malformed means None, never a
guess). `FAMILIES` lists them in the order the recogniser asks them.

The families sit in modules by the shape of their markup: `tags` (named tags that close),
`invokes` (`<invoke>` blocks), `tokens` (special tokens written out) and `bare` (no closing
marker); `reading` holds what they share.
"""

from __future__ import annotations

from proxy.repair.markup.families.bare import LlamaJson, Mistral, Pythonic
from proxy.repair.markup.families.invokes import DeepSeekDsml, MiniMaxM2
from proxy.repair.markup.families.tags import Glm, Hermes, LlamaFunction, Qwen3Coder
from proxy.repair.markup.families.tokens import DeepSeek, Harmony, KimiK2
from proxy.repair.markup.spans import MarkupFamily

__all__ = [
    "FAMILIES",
    "DeepSeek",
    "DeepSeekDsml",
    "Glm",
    "Harmony",
    "Hermes",
    "KimiK2",
    "LlamaFunction",
    "LlamaJson",
    "MiniMaxM2",
    "Mistral",
    "Pythonic",
    "Qwen3Coder",
]

# The order matters where families share an opener (`<tool_call>`: Hermes, Qwen3-Coder, GLM;
# `<function=`: Qwen3-Coder, Llama's): the recogniser asks a span's candidates in this order
# and takes the first name it gets (`CallRecogniser._choose`). test_families pins the order.
FAMILIES: tuple[MarkupFamily, ...] = (
    Hermes(),
    Qwen3Coder(),
    Glm(),
    KimiK2(),
    DeepSeek(),
    DeepSeekDsml(),
    Mistral(),
    LlamaJson(),
    LlamaFunction(),
    Pythonic(),
    Harmony(),
    MiniMaxM2(),
)
"""Every family, in the order the recogniser asks them (the first to name a call wins)."""
