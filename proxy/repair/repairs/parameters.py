"""Request parameters the upstream rejects, dropped or renamed before the request goes."""

from __future__ import annotations

from typing import Any

from proxy.repair.request_phase import RequestContext, RequestRepair

PROTECTED = frozenset({"model", "messages", "tools", "tool_choice", "stream"})
"""What the client's request is: never dropped or renamed, whatever a table or an error says."""

DROPPED_KIND = "parameter_dropped"
RENAMED_KIND = "parameter_renamed"


class ParameterRepair(RequestRepair):
    """OpenAI-compatible upstreams reject a whole request over one OpenAI parameter they do not
    know: Gemini 400 `Unknown name "store"`, Mistral 422 `extra_forbidden` for
    `max_completion_tokens`, Groq 400 `property 'store' is unsupported`. OpenAI's SDKs and the
    agents built on them send these on every turn, so every turn fails. The profile's
    `parameters` table says which to drop and which to send under the upstream's own name
    (the value kept). Parameters this upstream refused before reach the table as drops at its
    end (learning/refusals.py learns them from its 400/422). A request carrying none of them is
    untouched."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        changed = False
        for rule in context.rules.profile.parameters:
            name = rule.name
            if name in PROTECTED or name not in body or not rule.applies(body[name]):
                continue
            value = body.pop(name)
            changed = True
            target = rule.rename_to
            if target and target not in PROTECTED and target not in body:
                body[target] = value
                context.tally.count(RENAMED_KIND)
            else:  # a drop, or the client also sent the target name: its own value wins
                context.tally.count(DROPPED_KIND)
        return changed
