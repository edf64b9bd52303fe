"""A `json_schema` response format the upstream refuses, sent as JSON mode with the schema in
the prompt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.wire import json_codec

DOWNGRADED_KIND = "response_format_downgraded"

INSTRUCTION = "Answer with one JSON object, and nothing else"
"""What the model is told in place of the format, in these words whatever the request (the
same schema gives the same prompt, so an upstream's prompt cache still hits). "JSON" is in it:
JSON mode wants the word in the prompt."""
SCHEMA_FOLLOWS = ", that validates against this JSON schema: "
SEPARATOR = "\n\n"
"""Between the client's system text and the instruction appended to it."""

_INSTRUCTED_ROLES = ("system", "developer")


def asks_json_schema(request: Mapping[str, Any]) -> bool:
    """Whether the request asks for structured output by a JSON schema."""
    response_format = request.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") == "json_schema"


class ResponseFormatDowngraded(RequestRepair):
    """DeepSeek's chat API takes `response_format` `{"type": "json_object"}` (JSON mode) but
    refuses `{"type": "json_schema", …}` with a 400, "This response_format type is unavailable
    now" (llm-exe#662, inspect_ai#4916; serde's "response_format.type `json_schema` is
    unavailable now" before, litellm#7580); Groq refuses it for most models, vLLM did before it
    took schemas. Structured-output clients send exactly that: the AI SDK's `generateObject`,
    LangChain's `with_structured_output`, Claude Code's session title through the Messages
    front. With the route's `response_format_schema = "json_object"` (learned from that
    refusal, proxy/learning/refusal_rules.py, or set), the format goes up as
    `{"type": "json_object"}`, which these upstreams hold to valid JSON, and the schema, which
    JSON mode does not read, goes to the model as an instruction (`INSTRUCTION`, the schema
    compact after it). JSON mode also wants the word "json" in the prompt (DeepSeek: "Prompt
    must contain the word 'json' in some form to use 'response_format' of type
    'json_object'", vercel/ai#7913), which the instruction carries.

    The instruction is appended to a leading system (or developer) message, as a paragraph of
    its own or a text part, else goes first as a system message of its own: never a late
    system message, which some chat templates refuse. Counted as `response_format_downgraded`.
    The answer is not checked against the schema: JSON mode guarantees JSON, the schema is
    followed as the model follows an instruction, and the client validates what it gets as it
    would from any upstream."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        if context.rules.response_format_schema != "json_object" or not asks_json_schema(body):
            return False
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        described = body["response_format"].get("json_schema")
        schema = described.get("schema") if isinstance(described, dict) else None
        text = INSTRUCTION
        if isinstance(schema, dict):
            text += SCHEMA_FOLLOWS + json_codec.dumps(schema).decode()
        else:
            text += "."
        body["response_format"] = {"type": "json_object"}
        _instruct(messages, text)
        context.tally.count(DOWNGRADED_KIND)
        return True


def _instruct(messages: list[Any], text: str) -> None:
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") in _INSTRUCTED_ROLES:
        content = first.get("content")
        if isinstance(content, str):
            first["content"] = content + SEPARATOR + text if content else text
            return
        if isinstance(content, list):
            content.append({"type": "text", "text": text})
            return
    messages.insert(0, {"role": "system", "content": text})
