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
    base_url: str,
    model: str,
    prompt: str,
    key: str = "sk-codex",
    *,
    work: Path | None = None,
    home: Path | None = None,
    config: tuple[str, ...] = (),
    key_command: bool = False,
) -> list[dict[str, Any]]:
    """One `codex exec` run; its `--json` events. `work` is the workspace and `home` Codex's
    CODEX_HOME (temporary ones when None); each of `config` is one more `-c key=value`
    override. With `key_command` the provider reads its key from a command
    (`auth = {command = "printenv", ...}`, the README's setup) instead of `env_key`: Codex then
    fetches its model catalog from the proxy."""
    if work is None or home is None:
        with tempfile.TemporaryDirectory() as temporary:
            work = work or Path(temporary) / "work"
            home = home or Path(temporary) / "home"
            work.mkdir(exist_ok=True)
            home.mkdir(exist_ok=True)
            return run_codex(
                base_url,
                model,
                prompt,
                key,
                work=work,
                home=home,
                config=config,
                key_command=key_command,
            )
    credential = (
        'auth={command="printenv",args=["SF_CODEX_KEY"]}'
        if key_command
        else 'env_key="SF_CODEX_KEY"'
    )
    provider = (
        f'{{name="sf",base_url="{base_url}",wire_api="responses",{credential},'
        "supports_websockets=false,request_max_retries=0,stream_max_retries=0}"
    )
    overrides = [part for value in config for part in ("-c", value)]
    env = environment({**os.environ, "CODEX_HOME": str(home), "SF_CODEX_KEY": key})
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
            *overrides,
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


def model_catalog(directory: Path, model: str) -> str:
    """A `-c model_catalog_json=...` override that makes Codex offer `model` its freeform
    `apply_patch` tool (a `custom` tool whose input is the raw patch).

    Codex 0.171.0 reads the tools a model gets from its model catalog: its bundled one gives the
    freeform tool to OpenAI's slugs only, and a model it has no entry for (every Gemini,
    DeepSeek or OpenRouter name) gets no `apply_patch` tool at all, whatever `features.*` or
    `include_apply_patch_tool` say. `model_catalog_json` names a catalog file of the user's; an
    entry needs the fields below (Codex refuses the file naming the first one missing) and
    either `base_instructions` or `model_messages.instructions_template`."""
    entry = {
        "slug": model,
        "display_name": model,
        "apply_patch_tool_type": "freeform",
        "shell_type": "shell_command",
        "supported_reasoning_levels": [],
        "visibility": "list",
        "supported_in_api": True,
        "priority": 1,
        "support_verbosity": False,
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "experimental_supported_tools": [],
        "base_instructions": "You are a coding agent. Use apply_patch to edit files.",
    }
    path = directory / "models.json"
    path.write_text(json.dumps({"models": [entry]}))
    return f'model_catalog_json="{path}"'


def rollout_items(home: Path) -> list[dict[str, Any]]:
    """The Responses items Codex kept of its session (its rollout file under CODEX_HOME): the
    items it got from the stream and the outputs it made, which are the history it sends back."""
    items = []
    for rollout in sorted((home / "sessions").rglob("rollout-*.jsonl")):
        for line in rollout.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("type") == "response_item":
                items.append(entry["payload"])
    return items
