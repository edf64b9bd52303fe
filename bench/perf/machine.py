"""The machine a run measured on, and which revision of the proxy it measured."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from .config import ROOT


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
        "streamfix": source_revision(),
    }


def source_revision() -> str:
    """Which proxy is measured: the checkout's commit, and whether proxy/ differs from it."""
    try:
        git = ["git", "-C", str(ROOT)]
        rev = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--", "proxy"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return rev + (" + uncommitted changes in proxy/" if changed else "")
