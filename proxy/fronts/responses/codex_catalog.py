"""The model catalog Codex CLI reads from its provider's `GET /models?client_version=...`, for
the models the proxy's routes serve.

Codex looks a model's metadata up in its catalog by the longest slug that is a prefix of the
model's name. Its bundled catalog knows OpenAI's models only: any other name gets its fallback
metadata, with a "Model metadata for `...` not found" warning and no `apply_patch` tool at all.
A provider whose credential comes from an `auth` command (not `env_key`) has its catalog fetched
from its own base URL, merged over the bundled one. This catalog names each model a route names
exactly (shown in Codex's picker) and, hidden, the empty slug: a prefix of every name, so every
model the routes serve (patterns, the default route) has metadata, while OpenAI's models keep
their longer bundled slugs.

Every entry says what the Responses door gives any model: the freeform `apply_patch` (a
`custom` tool, offered upstream as a function of one string argument), the `shell_command`
tool, parallel calls. Nothing about the upstream model itself is claimed: no context window
(Codex's `model_context_window` sets one), no reasoning levels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CLIENT_VERSION = "client_version"
"""The query parameter Codex's catalog fetch carries: what tells it from a `GET /v1/models`
another client sends (which goes upstream)."""
CATCH_ALL_SLUG = ""
_GLOB = frozenset("*?[")

# Codex puts an entry's `base_instructions` in place of its own system prompt (an entry must
# have one). These are the proxy's own, short: how Codex's tools are meant to be used. A
# user's `model_instructions_file` replaces them.
BASE_INSTRUCTIONS = """\
You are a coding agent working in the user's workspace through the tools you are given.

- Run commands with the shell tool; read files with it too (cat, sed -n, rg), keeping output
  short.
- Edit files with apply_patch: its input is the raw patch, starting with `*** Begin Patch` and
  ending with `*** End Patch`, with `*** Add File: <path>`, `*** Update File: <path>` or
  `*** Delete File: <path>` sections; in an update, `@@` lines give context and each changed
  line starts with `-` or `+` (unchanged context lines with a space).
- Keep going until the user's request is done, then answer briefly: what you changed and
  anything left to do.
"""


def exact_model_names(patterns: Iterable[str]) -> list[str]:
    """The route patterns that name one model (no `*`, `?` or `[`), in order, once each."""
    names: list[str] = []
    for pattern in patterns:
        if pattern and not _GLOB.intersection(pattern) and pattern not in names:
            names.append(pattern)
    return names


def model_entry(slug: str, *, listed: bool, priority: int) -> dict[str, Any]:
    """One catalog entry with every field Codex 0.171 requires (it refuses the whole catalog
    naming the first one missing)."""
    return {
        "slug": slug,
        "display_name": slug,
        "description": "served through streamfix",
        "supported_reasoning_levels": [],
        "shell_type": "shell_command",
        "visibility": "list" if listed else "hide",
        "supported_in_api": True,
        "priority": priority,
        "base_instructions": BASE_INSTRUCTIONS,
        "supports_reasoning_summaries": False,
        "support_verbosity": False,
        "apply_patch_tool_type": "freeform",
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "supports_parallel_tool_calls": True,
        "experimental_supported_tools": [],
    }


def codex_catalog(patterns: Iterable[str]) -> dict[str, Any]:
    """Codex's `ModelsResponse`: the exact names among the routes' `patterns`, then the hidden
    catch-all that covers every other name (last, so it is never Codex's default model)."""
    names = exact_model_names(patterns)
    entries = [model_entry(name, listed=True, priority=i + 1) for i, name in enumerate(names)]
    entries.append(model_entry(CATCH_ALL_SLUG, listed=False, priority=len(names) + 1000))
    return {"models": entries}
