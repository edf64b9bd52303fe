"""`streamfix explain PATH...`: every cassette at the paths explained, to stdout."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from proxy.explain.render import Style, to_json, to_text
from proxy.explain.run import Explanation, Unreadable, cassette_paths, explain
from proxy.settings.schema import Settings
from proxy.wire import json_codec


def colour_wanted(choice: str) -> bool:
    """`always`/`never` as said; `auto` colours a terminal, unless NO_COLOR is set, and
    anything when FORCE_COLOR is (a pager or CI log that renders colour)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or sys.stdout.isatty()


def run_explain(targets: list[Path], settings: Settings, as_json: bool, colour: str) -> int:
    """0 when every cassette was explained; 2, with the reason on stderr, for a path that
    is not a cassette or a directory of them (checked before any output)."""
    try:
        paths = [path for target in targets for path in cassette_paths(target)]
        explanations = asyncio.run(_explain_all(paths, settings))
    except Unreadable as exc:
        print(f"streamfix explain: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json_codec.dumps_indented(to_json(explanations)).decode())
        return 0
    style = Style(colour_wanted(colour))
    print("\n\n".join(to_text(item, style) for item in explanations))
    return 0


async def _explain_all(paths: list[Path], settings: Settings) -> list[Explanation]:
    return [await explain(path, settings) for path in paths]
