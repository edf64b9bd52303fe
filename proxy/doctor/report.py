"""The doctor's report: one row per check, the verdicts, and the configuration that suits the
upstream, as text a person reads at a glance or as JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.doctor.examine import Problem
from proxy.learning.refusal_rules import REQUEST_RULES
from proxy.repair.profiles import PROFILES, profile_from_base_url
from proxy.repair.rules import RouteRuleKeys, resolve
from proxy.settings.toml_text import dumps

FINE, FIXED, NOT_FIXABLE = "fine", "fixed", "not_fixable"

# Keys that help when a check's request was refused direct: (check, route key, value). Read as
# data so a check added is one line here.
HELPFUL_KEYS: tuple[tuple[str, str, str], ...] = (
    ("schema_keywords", "schema_dialect", "gemini"),
    ("dotted_tool_name", "tool_names", "openai"),
    ("developer_role", "developer_role", "system"),
    ("two_system_messages", "system_messages", "merged"),
)

LEARNED = "learned automatically; set it to skip the first refusal"
"""Said where the proxy learned a key from the upstream's refusal (learning/refusal_rules.py)."""
_LEARNED_KINDS = {rule.kind: rule.key for rule in REQUEST_RULES}


@dataclass
class Row:
    name: str
    direct: list[Problem]
    after: list[Problem]
    repairs: dict[str, int] = field(default_factory=dict)
    """The repair kinds the proxy counted on this exchange (`x-streamfix-repairs`)."""
    request: dict[str, Any] = field(default_factory=dict)
    expects: int = 0
    with_config: tuple[str, list[Problem]] | None = None
    """The suggested key tried for this check, and the problems left with it."""

    @property
    def verdict(self) -> str:
        if not _failing(self.direct):
            return FINE
        return NOT_FIXABLE if _failing(self.after) else FIXED

    @property
    def observed(self) -> str:
        return "; ".join(p.text for p in self.direct) or "as OpenAI sends it"

    @property
    def consequences(self) -> list[str]:
        return list(dict.fromkeys(p.breaks for p in self.direct))

    @property
    def breaks(self) -> str:
        return "; ".join(self.consequences) or "nothing"

    @property
    def streamfix(self) -> str:
        done = ", ".join(f"{kind} x{n}" for kind, n in self.repairs.items()) or "nothing to do"
        left = [p.text for p in self.after]
        if left:
            same = left == [p.text for p in self.direct]
            done = f"{done}; the client still gets " + ("the same" if same else "; ".join(left))
        if self.with_config is not None:
            key, remaining = self.with_config
            outcome = "; ".join(p.text for p in remaining) if remaining else "fixed"
            done = f"{done}; with {key}: {outcome}"
        if self.learned:
            done = f"{done}; {', '.join(self.learned)} {LEARNED}"
        return done

    @property
    def learned(self) -> list[str]:
        """The route keys the proxy learned from this check's refusal."""
        return [_LEARNED_KINDS[kind] for kind in self.repairs if kind in _LEARNED_KINDS]


def _failing(found: list[Problem]) -> list[Problem]:
    return [p for p in found if not p.informational]


def parse_repairs(summary: str) -> dict[str, int]:
    """`kind:count,…` (the header's and the debug comment's spelling) as a dict."""
    counts = {}
    for item in summary.strip().split(","):
        kind, _, count = item.partition(":")
        if kind and kind != "none" and count.isdigit():
            counts[kind] = int(count)
    return counts


def _changes_rules(profile: str, key: str, value: str) -> bool:
    """Whether setting `key` to `value` changes the rules the profile already gives a route."""
    default = RouteRuleKeys()
    change: dict[str, Any] = {key: value}
    with_key = replace(default, **change)
    return resolve(with_key, PROFILES[profile]) != resolve(default, PROFILES[profile])


def suggested(
    base_url: str, model: str, rows: list[Row], api_key_env: str = "", route: str = ""
) -> dict[str, Any]:
    """The upstream table for this upstream: base URL, the profile its host implies, and the
    keys that would have answered a refusal the profile does not already cover."""
    profile = profile_from_base_url(base_url) or "generic"
    table: dict[str, Any] = {}
    if route:
        table |= {"name": route, "models": [model]}
    table |= {"base_url": base_url, "profile": profile}
    if api_key_env:
        table["api_key_env"] = api_key_env
    by_name = {row.name: row for row in rows}
    for check, key, value in HELPFUL_KEYS:
        row = by_name.get(check)
        refused = row is not None and any(p.text.startswith("rejected") for p in row.direct)
        # Fixed through the proxy only by learning it from the refusal: worth setting still.
        if not refused or row is None or not (_failing(row.after) or key in row.learned):
            continue
        # A key tried and still refused is not suggested: the row says what it got instead.
        failed = row.with_config is not None and bool(_failing(row.with_config[1]))
        if not failed and _changes_rules(profile, key, value):
            table[key] = value
    return {"routes": [table]} if route else {"upstream": table}


def as_json(upstream: str, model: str, rows: list[Row], config: dict[str, Any]) -> dict[str, Any]:
    checks = [check_json(row) for row in rows]
    return {"upstream": upstream, "model": model, "checks": checks, "config": config}


_COLOURS = {FINE: "32", FIXED: "33", NOT_FIXABLE: "31"}


def as_text(
    upstream: str,
    model: str,
    rows: list[Row],
    config: dict[str, Any],
    colour: bool,
    notes: list[str] | None = None,
) -> str:
    lines = [f"streamfix doctor: {upstream}, model {model}", ""]
    lines += row_lines(rows, colour)
    lines += ["", totals(rows), ""]
    lines += [f"note: {note}" for note in notes or ()]
    lines += [""] if notes else []
    lines.append("# Suggested configuration for this upstream (paste into streamfix.toml):")
    lines.append(dumps(config).rstrip("\n"))
    return "\n".join(lines) + "\n"


def row_lines(rows: list[Row], colour: bool, width: int = 0) -> list[str]:
    """One line per row (verdict, name, what the upstream did), and for a row that is not
    `fine` what it breaks and what streamfix did; names padded to `width` at least."""

    def verdict(text: str) -> str:
        padded = f"{text:<11}"
        return f"\x1b[{_COLOURS[text]}m{padded}\x1b[0m" if colour else padded

    lines = []
    width = max([width, *(len(row.name) for row in rows)])
    for row in rows:
        lines.append(f"{verdict(row.verdict)} {row.name:<{width}}  {_short(row.observed)}")
        if row.verdict != FINE:
            indent = " " * (12 + width + 2)
            for n, consequence in enumerate(row.consequences):
                label = "breaks:   " if n == 0 else "          "
                lines.append(f"{indent}{label} {_short(consequence)}")
            lines.append(f"{indent}streamfix: {_short(row.streamfix)}")
    return lines


def totals(rows: list[Row]) -> str:
    counts = {v: sum(row.verdict == v for row in rows) for v in (FINE, FIXED, NOT_FIXABLE)}
    return ", ".join(f"{n} {v}" for v, n in counts.items())


def check_json(row: Row) -> dict[str, str]:
    return {
        "name": row.name,
        "observed": row.observed,
        "breaks": row.breaks,
        "streamfix": row.streamfix,
        "verdict": row.verdict,
    }


def _short(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
