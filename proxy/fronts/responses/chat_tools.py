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
            name = _name(tool.get("name"), f"tools[{position}].name")
            description = tool.get("description") or ""
            if not isinstance(description, str):
                raise invalid(f"tools[{position}].description", "must be a string")
            described = description + _grammar_note(tool.get("format"))
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
            custom.add(name)
            translation.count("responses_custom_tool")
        elif kind == "namespace":
            namespace = _name(tool.get("name"), f"tools[{position}].name")
            inner = tool.get("tools") or tool.get("functions") or []
            for place, member in enumerate(inner if isinstance(inner, list) else ()):
                if not isinstance(member, dict):
                    continue
                where = f"tools[{position}].tools[{place}]"
                name = _name(member.get("name"), f"{where}.name")
                flat = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
                out.append(_function(member, flat, where))
                translation.namespaced[flat] = (namespace, name)
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
    syntax = fmt.get("syntax")
    syntax = syntax if isinstance(syntax, str) and syntax else "grammar"
    return f"\n\nThe input must follow this {syntax} grammar:\n{definition}"


def _name(name: Any, where: str) -> str:
    """A tool's (or namespace's) name: the events name calls back by it, so a string."""
    if not isinstance(name, str) or not name:
        raise invalid(where, "required, a string")
    return name


def _function(tool: dict[str, Any], name: Any, where: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": _name(name, f"{where}.name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid(f"{where}.parameters", "must be a JSON schema object")
    function["parameters"] = parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}
