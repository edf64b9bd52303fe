"""Naming a tool call the upstream sent without a name, when the request leaves no doubt."""

from __future__ import annotations

from typing import Any

from proxy.wire import json_codec


def unambiguous_tool_name(request: dict[str, Any], arguments: str) -> str | None:
    """The one function the call can be: the one `tool_choice` names, the only declared tool,
    or the only declared tool whose parameters fit the arguments' keys. Otherwise None."""
    forced = _forced_name(request.get("tool_choice"))
    if forced:
        return forced
    functions = _declared_functions(request.get("tools"))
    if len(functions) == 1:
        return functions[0].get("name")
    keys = _argument_keys(arguments)
    if keys is None:
        return None
    fitting = [f for f in functions if _parameters_fit(f.get("parameters"), keys)]
    return fitting[0].get("name") if len(fitting) == 1 else None


def _forced_name(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"] or None
    return None


def _declared_functions(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        return []
    functions = [tool.get("function") for tool in tools if isinstance(tool, dict)]
    return [f for f in functions if isinstance(f, dict) and isinstance(f.get("name"), str)]


def _argument_keys(arguments: str) -> set[str] | None:
    try:
        parsed = json_codec.loads(arguments or "{}")
    except json_codec.JSONDecodeError:
        return None
    return set(parsed) if isinstance(parsed, dict) else None


def _parameters_fit(parameters: Any, keys: set[str]) -> bool:
    """Every required parameter is present and every key is a declared property."""
    if not isinstance(parameters, dict):
        return False
    properties = parameters.get("properties")
    required = parameters.get("required")
    declared = set(properties) if isinstance(properties, dict) else set()
    needed = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    return needed <= keys <= declared
