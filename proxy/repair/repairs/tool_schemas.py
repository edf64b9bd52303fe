"""Tool schemas rewritten into the JSON Schema dialect the upstream accepts."""

from __future__ import annotations

from typing import Any

from proxy.repair.dialects.schemas import DIALECTS, rewrite_schema
from proxy.repair.exchange import Exchange
from proxy.repair.pipeline import Repair


class ToolSchemaRepair(Repair):
    """Gemini rejects a whole request over one JSON Schema keyword its `Schema` lacks
    (`additionalProperties`, `$schema`, `const`, a type array, ...); Moonshot rejects a node
    without `type`. Coding agents and MCP servers send exactly those, so every turn of a session
    fails before the model sees it. Each tool's `parameters` is rewritten for the profile's
    `schema_dialect` (the route's, by default the profile's; dialects/schemas.py has the rules
    and where each comes from), and every
    change is counted by kind. A profile without a dialect, or schemas that need nothing, leave
    the request untouched."""

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange

    async def on_request(self, body: dict[str, Any]) -> bool:
        dialect = DIALECTS.get(self._exchange.rules.schema_dialect)
        tools = body.get("tools")
        if dialect is None or not isinstance(tools, list):
            return False
        changed = False
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or "parameters" not in function:
                continue
            parameters, kinds = rewrite_schema(function["parameters"], dialect)
            for kind in kinds:
                self._exchange.count(kind)
            if parameters is not function["parameters"]:
                function["parameters"] = parameters
                changed = True
        return changed
