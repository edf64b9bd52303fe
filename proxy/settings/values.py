"""Reading and checking configuration values: TOML files, flattened keys, typed conversion.

Errors name the dotted key (`routes[0].base_url: ...`), so a bad config stops start-up with a
message that says where to look.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Declared beneath the settings, where the route rules check their own keys; re-exported here.
from proxy.wire.config_values import ConfigError as ConfigError
from proxy.wire.config_values import one_of as one_of


def is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # e.g. an unbalanced IPv6 bracket, or a port that is not a number
        return False


def read_toml(path: Path) -> dict[str, Any]:
    """The file's tables; every way it can fail to be read is one ConfigError naming it."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"config file {path} is a directory, not a TOML file") from exc
    except OSError as exc:  # permissions, a FIFO gone away, an I/O error
        raise ConfigError(f"config file {path}: cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes as UTF-8 itself
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def field_names(obj: Any) -> set[str]:
    return {f.name for f in fields(obj)}


def replace_checked(section: str, current: Any, items: Mapping[str, Any], text: bool = True) -> Any:
    """`current` with `items` set, each converted (see `convert` for `text`)."""
    types = {f.name: f.type for f in fields(current)}
    converted = {}
    for name, value in items.items():
        if name not in types:
            raise ConfigError(f"{section}.{name}: unknown config key{did_you_mean(name, types)}")
        converted[name] = convert(f"{section}.{name}", types[name], value, text)
    try:
        return replace(current, **converted)
    except ConfigError as exc:
        raise ConfigError(f"{section}.{exc}") from None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean `port`?` for a misspelt key (`prot`), or nothing when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


_KINDS: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def convert(key: str, type_name: Any, value: Any, text: bool = True) -> Any:
    """`value` as the field's type, or a ConfigError naming `key`.

    A typed value (TOML's, JSON's, a flag argparse already converted) must be of the field's
    type: an int key takes an int, a float key an int or a float, a bool key a bool, a str key a
    str; a bool is never a number (TOML would otherwise read `workers = true` as 1) and a float
    never an int (`port = 19101.9` is a mistake, not 19101). A string for another type is parsed
    only when `text` says it came from text (the environment, flags): `"8080"`, `"2.5"`, and for
    a bool `1/0, true/false, yes/no, on/off` in any case. In a TOML file a quoted `"yes"` for a
    bool key is refused: the file has real booleans.
    """
    if str(type_name).startswith("tuple"):
        items = value.split(",") if isinstance(value, str) and text else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(item.strip() if isinstance(item, str) else item for item in items if item)
    kind = _KINDS.get(str(type_name))
    if kind is None:
        return value
    if isinstance(value, str) and kind is not str:
        if not text:
            raise ConfigError(f"{key}: expected {_expected(kind)}, got the string {value!r}")
        return _parsed(key, kind, value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected str (a quoted string), got {value!r}")
        return value
    allowed = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise ConfigError(f"{key}: expected {_expected(kind)}, got {value!r}")
    return _positive(key, kind(value), value)


def _expected(kind: type) -> str:
    return {int: "int (a whole number)", float: "float (a number)", bool: "true or false"}[kind]


def _parsed(key: str, kind: type, value: str) -> Any:
    """A string from the environment or a flag as `kind`."""
    if kind is bool:
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    try:
        converted = kind(value)
    except ValueError as exc:
        raise ConfigError(f"{key}: expected {_expected(kind)}, got {value!r}") from exc
    return _positive(key, converted, value)


OFF_AT_ZERO = frozenset({"server.keepalive_seconds", "upstream.retry_after_max_seconds"})
"""The numbers for which 0 means "never" rather than a mistake (a route's `routes[i].` key
as its `upstream.` one)."""


def _positive(key: str, number: float, value: Any) -> float:
    # Every number the settings hold is a size, a count, a port or a duration. NaN compares
    # false with everything, so it would pass `<= 0` and then every limit check downstream.
    if not math.isfinite(number):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    off_at_zero = key in OFF_AT_ZERO or f"upstream.{key.partition('.')[2]}" in OFF_AT_ZERO
    if number == 0 and off_at_zero:
        return number
    if number <= 0:
        off = " or 0 (off)" if off_at_zero else ""
        raise ConfigError(f"{key}: must be positive{off}, got {value!r}")
    return number


def parse_keys(value: str | None) -> tuple[str, ...]:
    """`STREAMFIX_API_KEYS`: comma-separated. Unset means no keys; set to nothing but commas and
    blanks (`" , "`, or `""` from a secret that did not expand) is refused, since it would
    silently switch off the authentication it was meant to switch on."""
    if value is None:
        return ()
    keys = tuple(key.strip() for key in value.split(",") if key.strip())
    if not keys:
        raise ConfigError(
            "STREAMFIX_API_KEYS: set but holds no key (only commas and blanks); give one or "
            "more comma-separated keys, or unset it to run without the proxy's own keys"
        )
    return keys
