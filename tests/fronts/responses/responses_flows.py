"""A Responses client's tool loop, the way real ones run it, for the flow tests.

`history`: stateless, as Codex does (`store: false`, the whole history every turn, every output
item echoed back as received, `encrypted_content` included). `previous`: `store` on and
`previous_response_id`, only the new input each request (the Agents SDK's
`auto_previous_response_id`, openai-python users).
"""

from __future__ import annotations

from typing import Any

import openai

from tests.fronts.responses.test_events import check_invariants
from tests.support.gemini_upstream import TOOL_SCHEMAS

TOOLS = [
    {
        "type": "function",
        "name": name,
        "description": f"{name} tool",
        "parameters": schema,
        "strict": False,
    }
    for name, schema in TOOL_SCHEMAS.items()
]


def client(base_url: str, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)


def one_response(sdk: openai.OpenAI, stream: bool, **request: Any) -> dict[str, Any]:
    """The final response object; a stream's events are checked against the invariants."""
    if not stream:
        return sdk.responses.create(**request).model_dump(exclude_none=True)
    events = [
        event.model_dump(exclude_unset=True, mode="json")
        for event in sdk.responses.create(stream=True, **request)
    ]
    check_invariants(events)
    final: dict[str, Any] = events[-1]["response"]
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1]
    return final


def run_flow(
    base_url: str | list[str],
    model: str,
    questions: tuple[str, ...],
    mode: str,
    stream: bool,
    key: str = "sk-test",
) -> tuple[list[str], list[dict[str, Any]]]:
    """Each question answered through its tool steps; (final texts, every response). Several
    base URLs (replicas) take the requests in turn."""
    sdks = [client(url, key) for url in ([base_url] if isinstance(base_url, str) else base_url)]
    history: list[dict[str, Any]] = []
    previous: str | None = None
    finals: list[str] = []
    responses: list[dict[str, Any]] = []
    for question in questions:
        new_input: list[dict[str, Any]] = [{"role": "user", "content": question}]
        for _ in range(6):
            request: dict[str, Any] = {"model": model, "tools": TOOLS}
            if mode == "history":
                request.update(
                    input=history + new_input, store=False, include=["reasoning.encrypted_content"]
                )
            else:
                request["input"] = new_input
                if previous:
                    request["previous_response_id"] = previous
            response = one_response(sdks[len(responses) % len(sdks)], stream, **request)
            responses.append(response)
            output = response["output"]
            history += new_input + output
            previous = response["id"]
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                finals.append(
                    "".join(
                        part["text"]
                        for item in output
                        if item["type"] == "message"
                        for part in item["content"]
                    )
                )
                break
            new_input = [
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": f"the result of {call['name']} {call['arguments']}",
                }
                for call in calls
            ]
    return finals, responses
