"""The attributes of an exchange's upstream call span, in OpenTelemetry's GenAI semantic
conventions (the inference span: `gen_ai.*`, `server.*`), from what went upstream and what the
answer said. Names and values only: never prompt or answer text, never a credential.

Every door (chat completions, Responses, Messages) calls the upstream's chat completions, so the
operation is `chat` for all three; `streamfix.front` says which door the client came in by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.repair.answer_facts import AnswerFacts

if TYPE_CHECKING:
    from proxy.routing.routes import UpstreamRoute
    from proxy.server.record import ExchangeRecord

OPERATION = "chat"
_DEFAULT_PORTS = {"https": 443, "http": 80}
# Request parameters copied when they are numbers: body field -> attribute.
_NUMBERS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
)
# The limit on generated tokens, by its current name first.
_MAX_TOKENS = ("max_completion_tokens", "max_tokens")


def call_span_name(record: ExchangeRecord) -> str:
    """`{gen_ai.operation.name} {gen_ai.request.model}`, the conventions' span name."""
    model = record.model
    return f"{OPERATION} {model}" if isinstance(model, str) and model else OPERATION


def call_attributes(record: ExchangeRecord, route: UpstreamRoute) -> dict[str, Any]:
    """What is known when the request goes upstream: the operation, provider, server, model
    and the request's sampling parameters, as forwarded (after the request repairs)."""
    url = route.chat_url
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": record.provider,
        "server.address": url.host,
        "server.port": url.port or _DEFAULT_PORTS.get(url.scheme, 443),
        "streamfix.route": record.route,
    }
    if record.door:  # the door's own name (server/doors/)
        attributes["streamfix.front"] = record.door
    if isinstance(record.model, str):
        attributes["gen_ai.request.model"] = record.model
    body = record.forwarded.body if record.forwarded is not None else {}
    attributes["streamfix.stream"] = body.get("stream") is True
    for name in _MAX_TOKENS:
        value = body.get(name)
        if _is_int(value):
            attributes["gen_ai.request.max_tokens"] = value
            break
    for field, attribute in _NUMBERS:
        value = body.get(field)
        if _is_number(value):
            attributes[attribute] = value
    seed, choices = body.get("seed"), body.get("n")
    if _is_int(seed):
        attributes["gen_ai.request.seed"] = seed
    if _is_int(choices) and choices != 1:
        attributes["gen_ai.request.choice.count"] = choices
    return attributes


def answer_attributes(answer: AnswerFacts | None) -> dict[str, Any]:
    """What the answer said, as the client got it: the model and id, each choice's finish
    reason after the repairs, and the usage the upstream reported (absent when it reported
    none; never estimated)."""
    if answer is None:
        return {}
    found: dict[str, Any] = {
        "gen_ai.response.model": answer.model,
        "gen_ai.response.id": answer.id,
        "gen_ai.usage.input_tokens": answer.input_tokens,
        "gen_ai.usage.output_tokens": answer.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": answer.cached_input_tokens,
        "gen_ai.usage.reasoning.output_tokens": answer.reasoning_tokens,
    }
    attributes = {name: value for name, value in found.items() if value is not None}
    reasons = answer.finish_reasons
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    return attributes


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
