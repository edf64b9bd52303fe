"""How a configuration value is refused. Declared at the lowest layer whose keys are checked (the
route rules, `proxy/repair/rules.py`), so the repairs never import the settings that embed
them; `proxy.settings.values` re-exports both names for the rest of the configuration."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration names a key that does not exist or gives it an unusable value."""


def one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        choices = ", ".join(f'"{a}"' for a in allowed)
        raise ConfigError(f"{key}: must be one of {choices}, got {value!r}")
