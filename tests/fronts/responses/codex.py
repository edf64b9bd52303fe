"""Codex CLI, run offline against the proxy: `codex exec --json` with a custom model provider
(`wire_api = "responses"`, no websockets, no retries), as RESPONSES.md §5 describes.

The npm package ships its platform binary (about 450 MB), so it is not part of the test extra's
Node modules: point STREAMFIX_CODEX at a `codex` executable, or install it once with
`npm install --prefix tests/clients/codex @openai/codex@0.171.0`. Without it the Codex tests
skip and say how to get it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.nodejs import environment

ROOT = Path(__file__).resolve().parents[3]
INSTALLED = ROOT / "tests" / "clients" / "codex" / "node_modules" / ".bin" / "codex"
VERSION = "0.171.0"


def codex_binary() -> str:
    found = os.environ.get("STREAMFIX_CODEX") or (str(INSTALLED) if INSTALLED.exists() else "")
    if not found:
        pytest.skip(
            f"Codex CLI not installed: npm install --prefix tests/clients/codex "
            f"@openai/codex@{VERSION}, or set STREAMFIX_CODEX to a codex executable"
        )
    return found


def run_codex(
    base_url: str, model: str, prompt: str, key: str = "sk-codex"
) -> list[dict[str, Any]]:
    """One `codex exec` run; its `--json` events."""
    provider = (
        f'{{name="sf",base_url="{base_url}",wire_api="responses",env_key="SF_CODEX_KEY",'
        "supports_websockets=false,request_max_retries=0,stream_max_retries=0}"
    )
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as work:
        env = environment({**os.environ, "CODEX_HOME": home, "SF_CODEX_KEY": key})
        done = subprocess.run(
            [
                codex_binary(),
                "exec",
                "--skip-git-repo-check",
                "--json",
                "--dangerously-bypass-approvals-and-sandbox",
                "-m",
                model,
                "-c",
                'model_provider="sf"',
                "-c",
                f"model_providers.sf={provider}",
                prompt,
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    events = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    assert events, f"codex printed no events (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return events


def completed_items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        e["item"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == kind
    ]
