"""The Responses `response` object (in `response.created` and in the terminal event), how a
response ends, and its usage.

Exactly one terminal event per response: `response.completed`, `response.incomplete` (with
`incomplete_details.reason`: `max_output_tokens` when the upstream said `length`,
`content_filter`) or `response.failed` (with the upstream's error, or the proxy's words for a
broken-off stream). Usage is complete or null: Codex fails a turn without `total_tokens`.

Every field the Open Responses schema requires of the object is there (its `ResponseResource`,
tests/fronts/responses/spec/): the request's parameters echoed, the schema's defaults where
the request said nothing (`presence_penalty` 0, `top_logprobs` 0, `service_tier` "default"),
null only where the schema takes null. An echoed function tool carries `description`,
`parameters` and `strict` as the request said (null when it said nothing: the schema's
"not set").
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.translator import Aborted, End, UpstreamError

TERMINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete"}
"""A response's status -> its terminal event; any other status fails."""
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""A chat finish that leaves the response incomplete -> `incomplete_details.reason`."""


def terminal_event(status: str) -> str:
    return TERMINAL_EVENTS.get(status, "response.failed")


def incomplete_reason(finish_reason: Any) -> str | None:
    return INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None


def response_object(
    request: dict[str, Any],
    *,
    response_id: str,
    created_at: int,
    completed_at: int | None = None,
    status: str,
    error: dict[str, Any] | None,
    incomplete: dict[str, Any] | None,
    model: str,
    store: bool,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """The response object, echoing the request's fields as OpenAI's does (`output` empty
    and `usage` None while it is in progress)."""
    asked = request.get("reasoning")
    reasoning: dict[str, Any] = asked if isinstance(asked, dict) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": _echoed(request, "max_tool_calls", int, None),
        "model": model,
        "output": output,
        "parallel_tool_calls": _echoed(request, "parallel_tool_calls", bool, True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": store,
        "temperature": _echoed(request, "temperature", float, 1.0),
        "top_p": _echoed(request, "top_p", float, 1.0),
        "presence_penalty": _echoed(request, "presence_penalty", float, 0.0),
        "frequency_penalty": _echoed(request, "frequency_penalty", float, 0.0),
        "top_logprobs": _echoed(request, "top_logprobs", int, 0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": [echoed_tool(tool) for tool in request.get("tools") or []],
        "truncation": request.get("truncation") or "disabled",
        "usage": usage_of(usage),
        "user": _echoed(request, "user", str, None),
        "metadata": request.get("metadata") or {},
        "service_tier": _echoed(request, "service_tier", str, "default"),
        "safety_identifier": _echoed(request, "safety_identifier", str, None),
        "prompt_cache_key": _echoed(request, "prompt_cache_key", str, None),
    }


def _echoed(request: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """The request's `name` when it is a `kind` (an int is a float, a bool is no number),
    else `default`: what the response says was used."""
    value = request.get(name)
    if isinstance(value, bool) and kind is not bool:
        return default
    if kind is float:
        return value if isinstance(value, int | float) else default
    return value if isinstance(value, kind) else default


def echoed_tool(tool: Any) -> Any:
    """A function tool as the request gave it, with the fields the schema requires of an
    echoed one (`description`, `parameters`, `strict`: null when the request left them out).
    Other tools are echoed unchanged."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": None, **tool}


def usage_of(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage -> Responses usage, complete (Codex fails a turn without `total_tokens`)."""
    if usage is None:
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    prompt_details = _object(usage.get("prompt_tokens_details"))
    completion_details = _object(usage.get("completion_tokens_details"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _int(prompt_details.get("cached_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _int(completion_details.get("reasoning_tokens"))
        },
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
    }


def _int(value: Any) -> int:
    """A count: a non-negative integer, else 0 (the upstream said nothing usable)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def error_of(end: End) -> dict[str, Any]:
    """A failed response's `error`: the upstream's code and words, or the proxy's."""
    if isinstance(end, Aborted):
        body: dict[str, Any] = {"message": end.message, "code": end.code}
    else:
        body = end.body if isinstance(end, UpstreamError) and isinstance(end.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    code = inner.get("code") if isinstance(inner, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return {
        "code": str(code) if code not in (None, "") else "server_error",
        "message": str(message) if message else "the upstream stream failed",
    }
