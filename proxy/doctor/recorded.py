"""The report of `streamfix doctor --from DIR` (recorded cassettes examined with no network):
one row per cassette, under the upstream each was recorded against.

A folder of cassettes may mix upstreams (the repository's own mixes Gemini, OpenAI, vLLM and
Kimi shapes), and a cassette shows what an upstream answered to one request, not what it
accepts: so the report names only the upstreams and profiles the cassettes themselves
recorded, and suggests no configuration (the live battery, which tries its suggestions, does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.doctor.report import NOT_FIXABLE, Row, check_json, row_lines, totals

NOT_RECORDED = "(not recorded)"
"""The upstream of a cassette written before cassettes named theirs."""

NO_SUGGESTION = (
    "# No configuration suggested: a cassette shows what its upstream answered, not what it "
    "accepts.\n# `streamfix doctor --upstream URL --model NAME` probes one upstream and "
    "suggests what it needs."
)


@dataclass
class Recorded:
    """The cassettes recorded against one upstream (as the cassette names it) and profile."""

    base_url: str
    profile: str
    rows: list[Row] = field(default_factory=list)

    @property
    def heading(self) -> str:
        count = f"{len(self.rows)} cassette{'s' if len(self.rows) != 1 else ''}"
        profile = f", profile {self.profile}" if self.profile else ""
        return f"recorded against {self.base_url}{profile}: {count}"


def as_text(directory: Path, groups: list[Recorded], colour: bool) -> str:
    rows = [row for group in groups for row in group.rows]
    upstreams = len(groups)
    lines = [
        f"streamfix doctor --from {directory}: {len(rows)} cassettes, recorded against "
        f"{upstreams} upstream{'s' if upstreams != 1 else ''} (profiles as recorded)",
    ]
    width = max(len(row.name) for row in rows)
    for group in groups:
        lines += ["", group.heading, *row_lines(group.rows, colour, width)]
    lines += ["", totals(rows), "", NO_SUGGESTION]
    return "\n".join(lines) + "\n"


def as_json(directory: Path, groups: list[Recorded]) -> dict[str, Any]:
    return {
        "from": str(directory),
        "upstreams": [
            {"base_url": group.base_url, "profile": group.profile, "cassettes": len(group.rows)}
            for group in groups
        ],
        "checks": [
            check_json(row) | {"upstream": group.base_url, "profile": group.profile}
            for group in groups
            for row in group.rows
        ],
        "config": None,
    }


def unfixed(groups: list[Recorded]) -> bool:
    return any(row.verdict == NOT_FIXABLE for group in groups for row in group.rows)
