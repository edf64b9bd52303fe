"""Codex CLI, run offline against the proxy: `codex exec --json` with a custom model provider
(`wire_api = "responses"`, no websockets, no retries), as RESPONSES.md §5 describes.

The npm package ships its platform binary (about 450 MB), so it is kept apart from the test
extra's other Node modules: the first Codex test installs it once from the npm registry with the
test extra's own npm (`npm install --prefix tests/clients/codex @openai/codex@0.171.0`), or
STREAMFIX_CODEX points at a `codex` executable. An install that fails fails the tests, saying
why: they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.nodejs import environment, npm

ROOT = Path(__file__).resolve().parents[3]
INSTALLED = ROOT / "tests" / "clients" / "codex" / "node_modules" / ".bin" / "codex"
VERSION = "0.171.0"


def codex_binary() -> str:
    found = os.environ.get("STREAMFIX_CODEX")
    if found:
        return found
    if not INSTALLED.exists():
        _install()
    return str(INSTALLED)


def _install() -> None:
    """Codex CLI from the npm registry into tests/clients/codex (git ignores it), once."""
    command = [
        *npm(),
        "install",
        "--prefix",
        str(INSTALLED.parents[2]),
        "--no-audit",
        "--no-fund",
        f"@openai/codex@{VERSION}",
    ]
    try:
        done = subprocess.run(
            command, env=environment(), capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing @openai/codex@{VERSION} took over 900 s", pytrace=False)
    if done.returncode != 0 or not INSTALLED.exists():
        pytest.fail(
            f"installing @openai/codex@{VERSION} failed (exit {done.returncode}): "
            f"{done.stderr[-2000:]}",
            pytrace=False,
        )


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
