"""What the Messages front does with what a chat upstream cannot honour, by table, never by
accident: `anthropic-beta` features, and body fields with no chat counterpart.

Features that only change how Anthropic's own servers bill, cache, count or display are
ignored (the chat upstream has no such thing and the answer is the same); features that need
Anthropic's servers to run something are refused, so a client never believes a tool ran that
nobody ran. A feature in neither list is ignored and counted (`anthropic_beta_unknown`):
Claude Code adds new ones with every release, and refusing them would refuse Claude Code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError
from proxy.fronts.messages.translated import Translated

BETA_IGNORED = (
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "mid-conversation-tool-changes-",
    "thinking-token-count-",
    "advanced-tool-use-",
    "effort-",
    "thinking-display-updates-",
    "prompt-caching-",
    "extended-cache-ttl-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "output-128k-",
    "context-1m-",
    "token-counting-",
    "message-batches-",
    "oauth-",
    "pdfs-",
)
BETA_REFUSED = (
    "computer-use-",
    "code-execution-",
    "files-api-",
    "mcp-client-",
    "skills-",
    "web-fetch-",
    "search-results-",
)

# Body fields with no chat equivalent that change nothing a chat upstream could honour.
IGNORED_FIELDS = frozenset(
    {"output_config", "context_management", "service_tier", "cache_control", "container"}
)
REFUSED_FIELDS = {"mcp_servers": "MCP servers run on Anthropic's side; this proxy has none"}


def refuse_fields(body: dict[str, Any]) -> None:
    for name, why in REFUSED_FIELDS.items():
        if body.get(name):
            raise MessagesError(f"{name}: not supported by this proxy ({why})")


def check_betas(headers: Mapping[str, str], out: Translated) -> None:
    raw = headers.get("anthropic-beta") or ""
    for feature in (f.strip() for f in raw.split(",")):
        if not feature:
            continue
        if feature.startswith(BETA_REFUSED):
            raise MessagesError(
                f"anthropic-beta: {feature} needs Anthropic's own servers; this proxy refuses it"
            )
        if not feature.startswith(BETA_IGNORED):
            out.count("anthropic_beta_unknown")


def count_ignored_fields(body: dict[str, Any], used: set[str], out: Translated) -> None:
    """Counts each ignored field the request carries, but those the translation read."""
    for name in IGNORED_FIELDS - used:
        if name in body:
            out.count("messages_field_ignored")
