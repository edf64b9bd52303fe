"""The README's test command also lints, checks the formatting and type-checks the code.

`ruff check` and `ruff format --check` over the package, the tests and the bench, and `mypy`
strict on `proxy/` with pyproject.toml's `[tool.mypy]`. Each runs as a subprocess of this very
environment's tools (`python -m ruff`, `python -m mypy`, both in the test extra, pinned to a
minor), so CI needs no second step and a developer no other command: a red check fails here
with the tool's own report.

mypy keeps its cache in `.mypy_cache/` at the root: a cold run takes a few seconds, a warm one
about one.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINTED = ("proxy", "tests", "bench")
TIMEOUT_SECONDS = 600  # a cold mypy on a loaded two-core machine takes well under a minute


def run_tool(*arguments: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"`{' '.join(arguments)}` failed:\n{report}"


def test_ruff_check_passes() -> None:
    run_tool("ruff", "check", "--no-fix", *LINTED)


def test_ruff_format_leaves_the_code_as_it_is() -> None:
    run_tool("ruff", "format", "--check", *LINTED)


def test_mypy_strict_passes_on_the_package() -> None:
    # No arguments: what and how strictly come from pyproject.toml's [tool.mypy], the same
    # configuration a developer's `mypy` reads.
    run_tool("mypy")


def test_mypy_is_configured_strict_on_the_package() -> None:
    # The check above is only as strong as its configuration: loosening it is a visible change.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert config["files"] == ["proxy"]
    assert not [o for o in config.get("overrides", []) if "proxy" in str(o.get("module"))]
