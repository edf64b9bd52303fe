"""Where a bracketed value written as text ends, before it is parsed: the families whose markup
has no closing marker (Mistral, Llama, pythonic) end a call where its brackets balance."""

from __future__ import annotations

_OPEN = "{["
_CLOSE = "}]"


def balanced_end(text: str, start: int, quotes: str = '"') -> int | None:
    """The index just past the bracketed value that opens at `text[start]` (`{` or `[`), or
    None while it is not closed yet. Brackets inside string literals (opened by any of `quotes`,
    with backslash escapes) do not count; the first unmatched closer ends the scan too (the
    value is then malformed, and the parser that follows says so)."""
    if start >= len(text) or text[start] not in _OPEN:
        return None
    depth = 0
    quote = ""
    escaped = False
    for position in range(start, len(text)):
        char = text[position]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in quotes:
            quote = char
        elif char in _OPEN or char == "(":
            depth += 1
        elif char in _CLOSE or char == ")":
            depth -= 1
            if depth == 0:
                return position + 1
    return None
