"""Reading and checking configuration values: TOML files, flattened keys, typed conversion.

Errors name the dotted key (`routes[0].base_url: ...`), so a bad config stops start-up with a
message that says where to look.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class ConfigError(ValueError):
    """The configuration names a key that does not exist or gives it an unusable value."""


def is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # e.g. an unbalanced IPv6 bracket, or a port that is not a number
        return False


def one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        choices = ", ".join(f'"{a}"' for a in allowed)
        raise ConfigError(f"{key}: must be one of {choices}, got {value!r}")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
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


def replace_checked(section: str, current: Any, items: Mapping[str, Any]) -> Any:
    types = {f.name: f.type for f in fields(current)}
    converted = {}
    for name, value in items.items():
        if name not in types:
            raise ConfigError(f"{section}.{name}: unknown config key")
        converted[name] = convert(f"{section}.{name}", types[name], value)
    try:
        return replace(current, **converted)
    except ConfigError as exc:
        raise ConfigError(f"{section}.{exc}") from None


def convert(key: str, type_name: Any, value: Any) -> Any:
    """Values from the environment arrive as strings; TOML values arrive typed."""
    if str(type_name).startswith("tuple"):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(item.strip() if isinstance(item, str) else item for item in items if item)
    kind = {"int": int, "float": float, "bool": bool, "str": str}.get(str(type_name))
    if kind is None:
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if isinstance(value, bool) and kind is not str:
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    try:
        converted = kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: expected {kind.__name__}, got {value!r}") from exc
    if kind in (int, float) and converted <= 0:
        raise ConfigError(f"{key}: must be positive, got {value!r}")
    return converted


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
