"""The Node.js Messages clients (tests/clients/messages_node/): Claude Code's npm package and
the AI SDK's Anthropic provider, installed from package-lock.json with the test extra's npm.

Claude Code's package copies its native binary into place in a postinstall script; npm's
allow-scripts policy may skip it, so it is run here explicitly when the binary is still the
placeholder stub."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

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
