"""Local `$ref`s replaced by what they point to, so no upstream has to resolve them.

Gemini's function declarations have no `$ref` or `$defs` field ("Unknown name \"$ref\"",
"Unknown name \"definitions\"": zed#30188; pydantic and FastMCP tools always carry them,
hermes-agent#99438). Moonshot resolves them itself but fails on some ("$defs not found for
reference", command-code#566) and rejects a `$ref` whose siblings repeat a target's keyword
("conflicting keywords found after $ref expansion: description", kimi-cli#2061). Inlined, the
question is gone for both. A `$ref`'s siblings describe this use of the target, so they win
over the target's own keywords.

Recursion is bounded: a reference may be open `RECURSION_DEPTH` times on one path (the model
sees that many real levels); the next one becomes `{"type": <target's type, else "object">,
"description": "<description> (recursive: see <Name>)"}`. `MAX_INLINED` bounds the total,
so a schema whose references fan out cannot grow without end; past it, references are cut the
same way.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from proxy.repair.dialects.kinds import (
    RECURSION_CUT_KIND,
    REF_INLINED_KIND,
    REF_UNRESOLVED_KIND,
    REMOVED_KIND,
)
from proxy.repair.dialects.notes import with_notes
from proxy.repair.dialects.walk import Schema, map_children

RECURSION_DEPTH = 2
MAX_INLINED = 500
DEFINITIONS = ("$defs", "definitions")


def inline_refs(schema: Schema, kinds: list[str]) -> Schema:
    """`schema` with every local `$ref` inlined and every `$defs`/`definitions` removed; the
    same object when it has neither. Each change is appended to `kinds`."""
    if not _mentions_refs(schema):
        return schema
    return _Inliner(schema, kinds).node(schema, ())


def resolve(root: Schema, ref: str) -> Schema | None:
    """The schema a local JSON pointer (`#`, `#/$defs/Name`, `#/properties/a`) names in
    `root`, or None (a remote reference, a missing target, a target that is no schema)."""
    if not ref.startswith("#"):
        return None
    target: Any = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else ():
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    if target is True:
        return {}
    return target if isinstance(target, dict) else None


def _mentions_refs(node: Any) -> bool:
    if isinstance(node, dict):
        if "$ref" in node or any(key in node for key in DEFINITIONS):
            return True
        return any(_mentions_refs(value) for value in node.values())
    if isinstance(node, list):
        return any(_mentions_refs(value) for value in node)
    return False


class _Inliner:
    def __init__(self, root: Schema, kinds: list[str]) -> None:
        self._root = root
        self._kinds = kinds
        self._budget = MAX_INLINED

    def node(self, node: Schema, open_refs: tuple[str, ...]) -> Schema:
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._expand(node, ref, open_refs)
        dropped = [key for key in DEFINITIONS if key in node]
        if dropped:
            # Every reference into them is resolved against the original root.
            node = {key: value for key, value in node.items() if key not in DEFINITIONS}
            self._kinds.extend(REMOVED_KIND for _ in dropped)
        return map_children(node, lambda child: self.node(child, open_refs))

    def _expand(self, node: Schema, ref: str, open_refs: tuple[str, ...]) -> Schema:
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        target = resolve(self._root, ref)
        if target is None:
            # Nothing here says what it is; the model at least learns where it pointed.
            self._kinds.append(REF_UNRESOLVED_KIND)
            siblings["description"] = with_notes(siblings.get("description"), [f"see {ref}"])
            return self.node(siblings, open_refs)
        if open_refs.count(ref) >= RECURSION_DEPTH or self._budget <= 0:
            self._kinds.append(RECURSION_CUT_KIND)
            return _cut(target, ref, siblings)
        self._budget -= 1
        self._kinds.append(REF_INLINED_KIND)
        return self.node({**target, **siblings}, (*open_refs, ref))


def _cut(target: Schema, ref: str, siblings: Schema) -> Schema:
    kind = target.get("type")
    name = ref.rsplit("/", 1)[-1] if "/" in ref else "the whole schema"
    description = siblings.get("description", target.get("description"))
    return {
        "type": kind if isinstance(kind, str) else "object",
        "description": with_notes(description, [f"recursive: see {unquote(name)}"]),
    }
