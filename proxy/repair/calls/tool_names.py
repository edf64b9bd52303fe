"""Tool names an upstream accepts, and the renaming of those it would reject.

The rules are data (`TOOL_NAME_RULES`), each from the upstream's own 400:

- "openai": `^[a-zA-Z0-9_-]{1,64}$`. OpenAI answers "Invalid 'tools[0].function.name': string
  does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
  (brekkylab/ailoy#109; DeepSeek answers with the same message, nikkigallery/Whimbox#61),
  "string too long. Expected a string with maximum length 64" (openai/codex#1289), and checks
  the history's `messages[N].tool_calls[M].function.name` the same way (mcp-use/mcp-use#90).
- "gemini": "Invalid function name. Must start with a letter or an underscore. Must be
  alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a
  maximum length of 64." (cline/cline#7339, kaitranntt/ccs#25; the older wording, without
  colons, in google-gemini/gemini-cli#2966).

The renaming is a pure function of the request's own names, so no store is needed: the
response's names are mapped back with the same request's mapping, and the client's next request
(which carries its own names again) is renamed the same way. A name the rule accepts is never
changed; each other name gets its bad characters replaced by `_`, a `_` in front when it cannot
start with its first character, and, when it is too long or its new name is already taken, a
hash of the original name at the end (cut to fit), so the new names are unique among the
request's names. Names are renamed in sorted order, so the tools' order changes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NameRule:
    """What a tool name must be for one upstream."""

    name: str
    characters: str
    """A regex character class: every character of the name."""
    first: str
    """A regex character class: the first character."""
    max_length: int

    def accepts(self, name: str) -> bool:
        return re.fullmatch(self._pattern(), name) is not None

    def _pattern(self) -> str:
        return f"{self.first}{self.characters}{{0,{self.max_length - 1}}}"


TOOL_NAME_RULES: dict[str, NameRule] = {
    "openai": NameRule("openai", "[a-zA-Z0-9_-]", "[a-zA-Z0-9_-]", 64),
    "gemini": NameRule("gemini", "[a-zA-Z0-9_.:-]", "[a-zA-Z_]", 64),
}

_HASH_CHARS = 8


def renaming(names: Iterable[str], rule: NameRule) -> dict[str, str]:
    """Each name `rule` rejects -> its new name; names it accepts are not in the mapping."""
    distinct = dict.fromkeys(names)
    taken = {name for name in distinct if rule.accepts(name)}
    mapping: dict[str, str] = {}
    for original in sorted(name for name in distinct if name not in taken):
        new = _cleaned(original, rule)
        if len(new) > rule.max_length or new in taken:
            # Distinct candidates, one more than the names taken: one of them is free.
            for attempt in range(len(taken) + 1):
                new = _hashed(_cleaned(original, rule), original, attempt, rule)
                if new not in taken:
                    break
        taken.add(new)
        mapping[original] = new
    return mapping


def _cleaned(name: str, rule: NameRule) -> str:
    cleaned = "".join(c if re.fullmatch(rule.characters, c) else "_" for c in name)
    if not cleaned or not re.fullmatch(rule.first, cleaned[0]):
        cleaned = "_" + cleaned
    return cleaned


def _hashed(cleaned: str, original: str, attempt: int, rule: NameRule) -> str:
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()
    suffix = "_" + digest[:_HASH_CHARS] + (str(attempt) if attempt else "")
    return cleaned[: rule.max_length - len(suffix)] + suffix


# ── where a request names its tools ──────────────────────────────────────────


def _functions(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object of the request whose `name` is a tool's name: the declared functions, the
    history's calls, the `tool_choice` that names one (or the ones `allowed_tools` lists)."""
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            yield tool["function"]
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                yield call["function"]
        if message.get("role") in ("tool", "function") and isinstance(message.get("name"), str):
            yield message  # a tool result that names its tool (Gemini's own history does)
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        if isinstance(choice.get("function"), dict):
            yield choice["function"]
        listed = choice.get("allowed_tools")
        allowed = listed.get("tools") if isinstance(listed, dict) else None
        for tool in allowed if isinstance(allowed, list) else ():
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
                yield tool["function"]


def rename_request(request: dict[str, Any], rule: NameRule) -> dict[str, str]:
    """Rename, in place, every tool name in `request` that `rule` rejects; the mapping used
    (original -> new), empty when every name is accepted and nothing was touched."""
    named = [f for f in _functions(request) if isinstance(f.get("name"), str)]
    mapping = renaming((f["name"] for f in named), rule)
    if mapping:
        for function in named:
            if function["name"] in mapping:
                function["name"] = mapping[function["name"]]
    return mapping
