"""Tool schemas rewritten into the JSON Schema dialect the upstream accepts."""

from __future__ import annotations

from typing import Any

from proxy.repair.dialects.schemas import DIALECTS, rewrite_schema
from proxy.repair.request_phase import RequestContext, RequestRepair


class ToolSchemaRepair(RequestRepair):
    """Gemini rejects a whole request over one JSON Schema keyword its `Schema` lacks
    (`additionalProperties`, `$schema`, `const`, a type array, ...); Moonshot rejects a node
    without `type`. Coding agents and MCP servers send exactly those, so every turn of a session
    fails before the model sees it. Each tool's `parameters` is rewritten for the profile's
    `schema_dialect` (the route's, by default the profile's; dialects/schemas.py has the rules
    and where each comes from), and every
    change is counted by kind. A profile without a dialect, or schemas that need nothing, leave
    the request untouched."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        dialect = DIALECTS.get(context.rules.schema_dialect)
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
                context.tally.count(kind)
            if parameters is not function["parameters"]:
                function["parameters"] = parameters
                changed = True
        return changed
