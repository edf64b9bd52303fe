"""Every repository path the docs name exists: a test file cited as proof, a module, a
recording. A path goes stale when a file moves, and a reader who follows it finds nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "recordings/README.md", "pyproject.toml", "config/streamfix.toml")

# A path under one of the repository's folders, a Markdown file, or a bare file name (a
# module, a test file, a config file), as the docs write them in prose or in backticks.
PATH = re.compile(
    r"(?<![\w/.$-])"
    r"((?:proxy|tests|bench|config|recordings|\.ci)/[\w./*-]*[\w*/]"
    r"|[A-Z][A-Za-z_]*\.md"
    r"|[\w-]+\.(?:py|toml|json|mjs|yml))"
    r"(?![\w/])"
)

NOT_OURS = {
    "tests/integration": "the reader's own tests, in the record and replay example",
    "opencode.json": "opencode's config file, in the reader's project",
    "0007-gemini-3-flash-preview-stream-200.json": "how a recorded cassette is named",
}

SKIPPED_FOLDERS = {".venv", "node_modules", ".git", "__pycache__"}


def _repository_names() -> set[str]:
    names: set[str] = set()
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if not SKIPPED_FOLDERS.intersection(parts):
            names.add(path.name)
    return names


NAMES = _repository_names()


def named_paths(text: str) -> set[str]:
    return set(PATH.findall(text)) - set(NOT_OURS)


def exists(path: str) -> bool:
    """A path with a folder must be there as written; a bare name somewhere in the repository."""
    if "/" in path.rstrip("/"):
        return any(ROOT.glob(path.rstrip("/")))
    return path in NAMES


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc: str) -> None:
    named = named_paths((ROOT / doc).read_text())
    assert named, f"{doc}: no paths found; has the pattern stopped matching?"
    missing = sorted(path for path in named if not exists(path))
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_the_pattern_catches_the_stale_paths_of_issue_28() -> None:
    text = (
        "listed in `tests/test_faults.py`, (PROTOCOL.md §2.4) and "
        "`tests/repairs/test_receipt_capture_linear.py`; `test_tenancy_hardening.py`"
    )
    assert not any(exists(path) for path in named_paths(text))
    assert len(named_paths(text)) == 4
