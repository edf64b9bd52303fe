"""Responses tools -> chat functions, by type: `function` as it is (`strict` dropped: most
chat upstreams reject or ignore it), `custom` as a function of one string argument `input`
(its grammar told in the description), `namespace` flattened to `namespace__name`; hosted
tools are dropped (Codex's `web_search` with `external_web_access: false` is one). The
translation learns which names were custom or flattened: the events name them back."""

from __future__ import annotations

from typing import Any

from proxy.fronts.responses.openai_errors import invalid
from proxy.fronts.responses.translation import CUSTOM_INPUT, NAMESPACE_SEPARATOR, Translation

HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer",
        "computer_use_preview",
        "mcp",
        "image_generation",
        "local_shell",
        "shell",
        "apply_patch",
    }
)


def chat_tools(tools: Any, translation: Translation) -> list[dict[str, Any]]:
    """Responses tools as chat functions; the translation learns which are custom and which
    were flattened from a namespace (the events name them back)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "must be a list")
    out: list[dict[str, Any]] = []
    custom: set[str] = set()
    for position, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            raise invalid(f"tools[{position}].type", "required, a string")
        if kind == "function":
            out.append(_function(tool, tool.get("name"), f"tools[{position}]"))
        elif kind == "custom":
            name = tool.get("name")
            described = str(tool.get("description") or "") + _grammar_note(tool.get("format"))
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": described,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                CUSTOM_INPUT: {
                                    "type": "string",
                                    "description": "The tool's whole input, as free text.",
                                }
                            },
                            "required": [CUSTOM_INPUT],
                        },
                    },
                }
            )
            custom.add(str(name))
            translation.count("responses_custom_tool")
        elif kind == "namespace":
            namespace = tool.get("name")
            inner = tool.get("tools") or tool.get("functions") or []
            for member in inner if isinstance(inner, list) else ():
                if not isinstance(member, dict):
                    continue
                flat = f"{namespace}{NAMESPACE_SEPARATOR}{member.get('name')}"
                out.append(_function(member, flat, f"tools[{position}]"))
                translation.namespaced[flat] = (str(namespace), str(member.get("name")))
            translation.count("responses_namespace_tool")
        else:  # a hosted tool (HOSTED_TOOLS) or one this bridge does not know
            translation.count("responses_hosted_tool_dropped")
    translation.custom_tools = frozenset(custom)
    return out


def _grammar_note(fmt: Any) -> str:
    """A custom tool's grammar, told to a model that cannot be constrained by it."""
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return ""
    definition = fmt.get("definition")
    if not isinstance(definition, str) or not definition:
        return ""
    syntax = fmt.get("syntax") or "grammar"
    return f"\n\nThe input must follow this {syntax} grammar:\n{definition}"


def _function(tool: dict[str, Any], name: Any, where: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name", "required")
    function: dict[str, Any] = {"name": name}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}
