"""The request's messages reshaped into what the upstream accepts (roles, contents, call ids)."""

from __future__ import annotations

from typing import Any

from proxy.repair.messages.assistant_content import AssistantContentNormalised
from proxy.repair.messages.developer_role import DeveloperToSystem
from proxy.repair.messages.nine_alnum_ids import NineAlnumCallIds
from proxy.repair.messages.system_merge import SystemMessagesMerged
from proxy.repair.messages.tool_content import ToolContentFlattened
from proxy.repair.profiles import MessageRules
from proxy.repair.request_phase import RequestContext, RequestRepair


class MessageShapeRepair(RequestRepair):
    """An upstream that speaks OpenAI's chat API may still reject a request over one message's
    shape: a `developer` role (DeepSeek, Mistral), a second or late system message (Qwen 3.5's
    template on vLLM), a null or an empty content beside tool calls (Mistral, LM Studio), a tool
    result as text parts (Kimi), a call id begun on another provider (Mistral). The route's
    `MessageRules` (by default the profile's; proxy/repair/messages/ has each rule and its
    sources) say which apply, and they run in this order:

    1. developer → system, so the merge below sees a developer message as the system message
       it has become;
    2. system messages merged into one leading message;
    3. the assistant's content beside tool calls;
    4. tool results flattened to strings;
    5. call ids mapped to nine alphanumerics, last, once the messages are what goes up.

    Each change is counted by its rule's kind. A request no rule applies to is left as sent,
    so it goes upstream byte for byte."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        if context.rules.messages == _AS_SENT:
            return False  # most routes: nothing to reshape, and no walk of the messages
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        changed = False
        for rule in _rules(context.rules.messages):
            amount = rule.apply(messages)
            if amount:
                context.tally.count(rule.KIND, amount)
                changed = True
        return changed


_AS_SENT = MessageRules()


def _rules(rules: MessageRules) -> list[Any]:
    chosen: list[Any] = []
    if rules.developer_role == "system":
        chosen.append(DeveloperToSystem())
    if rules.system_messages == "merged":
        chosen.append(SystemMessagesMerged())
    if rules.assistant_tool_content != "as_sent":
        chosen.append(AssistantContentNormalised(rules.assistant_tool_content))
    if rules.tool_content == "string":
        chosen.append(ToolContentFlattened())
    if rules.tool_call_ids == "nine_alnum":
        chosen.append(NineAlnumCallIds())
    return chosen
