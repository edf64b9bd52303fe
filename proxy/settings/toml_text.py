"""A small TOML writer for the settings document `streamfix config` prints, so its output can be
pasted back into a config file (tomllib reads TOML but nothing in the standard library writes it).

It writes what settings hold: tables, arrays of tables (`[[routes]]`), strings, ints, floats,
bools and arrays of those. Keys named in `notes` are not config keys (values shown for the
reader, such as where a secret comes from): they are written as comments, so pasting the output
back never sets them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Everything TOML forbids raw in a basic string (C0 controls but tab, DEL), and C1 controls and
# the line and paragraph separators, which TOML allows but a terminal or an editor may act on.
_ESCAPED = {
    c: f"\\u{c:04x}" for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029) if c != 0x09
}
_ESCAPED |= {ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r"}


def dumps(document: Mapping[str, Any], notes: Collection[str] = ()) -> str:
    """`document` as TOML text: its scalars first, then one table per mapping, one `[[name]]`
    per entry of a non-empty list of mappings (an empty one is `key = []`, read back alike)."""
    lines: list[str] = []
    _table(lines, document, (), notes)
    return "\n".join(lines).strip("\n") + "\n"


def _table(lines: list[str], table: Mapping[str, Any], path: tuple[str, ...], notes: Any) -> None:
    tables = []
    for key, value in table.items():
        if isinstance(value, Mapping) or _is_table_array(value):
            tables.append((key, value))
        elif key in notes:
            lines.append(f"# {key} (shown, not a config key): {value_text(value)}")
        else:
            lines.append(f"{key_text(key)} = {value_text(value)}")
    for key, value in tables:
        name = ".".join(key_text(part) for part in (*path, key))
        for entry in [value] if isinstance(value, Mapping) else value:
            lines.extend(["", f"[{name}]" if isinstance(value, Mapping) else f"[[{name}]]"])
            _table(lines, entry, (*path, key), notes)


def _is_table_array(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(item, Mapping) for item in value)
    )


def key_text(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else string_text(key)


def string_text(text: str) -> str:
    return '"' + text.translate(_ESCAPED) + '"'


def value_text(value: Any) -> str:
    """One TOML value. bool before int: a bool is an int in Python, not in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # always with a "." or an exponent, so it reads back as a float
    if isinstance(value, str):
        return string_text(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(value_text(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")
