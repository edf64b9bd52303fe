"""The Node.js Messages clients (tests/clients/messages_node/): Claude Code's npm package and
the AI SDK's Anthropic provider, installed from package-lock.json with the test extra's npm.

Claude Code's package copies its native binary into place in a postinstall script; npm's
allow-scripts policy may skip it, so it is run here explicitly when the binary is still the
placeholder stub."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support import nodejs

HERE = Path(__file__).resolve().parent / "messages_node"
NODE_MODULES = HERE / "node_modules"
STAMP = NODE_MODULES / ".streamfix-lock-sha256"
CLAUDE_PACKAGE = NODE_MODULES / "@anthropic-ai" / "claude-code"
CLAUDE = CLAUDE_PACKAGE / "bin" / "claude.exe"


def _lock_hash() -> str:
    return hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()


def ensure_installed() -> None:
    environment = nodejs.environment()
    if not (STAMP.is_file() and STAMP.read_text().strip() == _lock_hash()):
        subprocess.run(
            [*nodejs.npm(), "ci", "--no-audit", "--no-fund"],
            cwd=HERE,
            env=environment,
            check=True,
            capture_output=True,
            timeout=600,
        )
        STAMP.write_text(_lock_hash())
    if CLAUDE.stat().st_size < 1_000_000:  # the placeholder: the postinstall did not run
        subprocess.run(
            [nodejs.node(), "install.cjs"],
            cwd=CLAUDE_PACKAGE,
            env=environment,
            check=True,
            capture_output=True,
            timeout=300,
        )


def claude_environment(proxy: str, home: Path, side_model: str = "side") -> dict[str, str]:
    """Claude Code's environment for a headless offline run against `proxy`, in `home` (its
    HOME, config directory and TMPDIR): telemetry, error reports, auto-update and surveys off,
    no retries, and the small fast model named `side_model` so its requests are recognisable.
    Non-essential traffic is left on: a test that wants it off says so."""
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "TMPDIR": str(home),
        "ANTHROPIC_BASE_URL": proxy,
        "ANTHROPIC_API_KEY": "dummy-key",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "DISABLE_INSTALLATION_CHECKS": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": side_model,
        "ANTHROPIC_SMALL_FAST_MODEL": side_model,
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    if os.geteuid() == 0:
        environment["IS_SANDBOX"] = "1"  # root may skip permissions only in a sandbox
    return environment


def run_claude(
    model: str, home: Path, environment: dict[str, str], *arguments: str, stdin: str = ""
) -> list[dict[str, Any]]:
    """`claude -p … --output-format stream-json --verbose --dangerously-skip-permissions` in
    `home`; its JSON lines. `stdin` is what it reads (stream-json input lines, with
    `--input-format stream-json` among the arguments)."""
    command = [str(CLAUDE), "-p", *arguments, "--model", model, "--output-format", "stream-json"]
    command += ["--verbose", "--dangerously-skip-permissions"]
    done = subprocess.run(
        command,
        cwd=home,
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return lines
