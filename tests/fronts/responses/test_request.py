"""Responses requests -> chat requests: the shapes Codex, the AI SDK, the Agents SDK and
openai-python send (RESPONSES.md §1, §3), and what is ignored or refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.fronts import receipt_tokens
from proxy.fronts.responses.request import FrontError, Lookups, Translation, translate
from proxy.fronts.responses.store import ResponsesStore
from proxy.repair.tenancy import ReceiptScope
from proxy.store.memory_store import MemoryStore

SCOPE = ReceiptScope("tenant-a", "upstream-1")


def lookups(store: ResponsesStore | None = None) -> Lookups:
    store = store or ResponsesStore(MemoryStore(100, 60), SCOPE)
    return Lookups(store.transcript, store.turn, store.items, store.token_scope)


def run(body: dict[str, Any], found: Lookups | None = None) -> Translation:
    return asyncio.run(translate(body, found or lookups()))


def refused(body: dict[str, Any], found: Lookups | None = None) -> FrontError:
    with pytest.raises(FrontError) as caught:
        run(body, found)
    return caught.value


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    chat = run({"model": "m", "input": "hi", "instructions": "be brief", "stream": True}).chat
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_messages_with_and_without_type_and_parts() -> None:
    translation = run(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "look"},
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64,AA",
                            "detail": "low",
                        },
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a cat", "annotations": []}],
                },
                {"role": "user", "content": "thanks"},
            ],
        }
    )
    assert translation.counts == {"responses_developer_role": 1}
    chat = translation.chat
    assert chat["messages"] == [
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
                },
            ],
        },
        {"role": "assistant", "content": "a cat"},
        {"role": "user", "content": "thanks"},
    ]


def test_a_run_of_calls_folds_into_one_assistant_message_and_outputs_become_tool_messages() -> None:
    chat = run(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "two things"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_A",
                    "name": "a",
                    "arguments": "{}",
                },
                {"type": "function_call", "call_id": "call_B", "name": "b", "arguments": '{"x":1}'},
                {"type": "function_call_output", "call_id": "call_A", "output": "ra"},
                {
                    "type": "function_call_output",
                    "call_id": "call_B",
                    "output": [{"type": "input_text", "text": "rb"}],
                },
            ],
        }
    ).chat
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_A", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                {
                    "id": "call_B",
                    "type": "function",
                    "function": {"name": "b", "arguments": '{"x":1}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_A", "content": "ra"},
        {"role": "tool", "tool_call_id": "call_B", "content": "rb"},
    ]


def test_tools_function_custom_namespace_and_hosted() -> None:
    translation = run(
        {
            "model": "m",
            "input": "x",
            "tools": [
                {
                    "type": "function",
                    "name": "exec_command",
                    "parameters": {"type": "object"},
                    "strict": False,
                    "description": "run",
                },
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "patch",
                    "format": {"type": "grammar"},
                },
                {
                    "type": "namespace",
                    "name": "multi_agent_v1",
                    "tools": [
                        {"type": "function", "name": "spawn", "parameters": {"type": "object"}}
                    ],
                },
                {"type": "web_search", "external_web_access": False},
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        }
    )
    tools = translation.chat["tools"]
    assert [t["function"]["name"] for t in tools] == [
        "exec_command",
        "apply_patch",
        "multi_agent_v1__spawn",
    ]
    assert "strict" not in tools[0]["function"]
    assert tools[1]["function"]["parameters"]["required"] == ["input"]
    assert translation.custom_tools == {"apply_patch"}
    assert translation.namespaced == {"multi_agent_v1__spawn": ("multi_agent_v1", "spawn")}
    assert translation.chat["tool_choice"] == "auto"
    assert translation.chat["parallel_tool_calls"] is True
    assert translation.counts == {
        "responses_hosted_tool_dropped": 1,
        "responses_custom_tool": 1,
        "responses_namespace_tool": 1,
    }


def test_custom_and_namespaced_calls_in_history_go_back_as_functions() -> None:
    chat = run(
        {
            "model": "m",
            "input": [
                {
                    "type": "custom_tool_call",
                    "call_id": "c1",
                    "name": "apply_patch",
                    "input": "*** Begin Patch",
                },
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "spawn",
                    "namespace": "multi_agent_v1",
                    "arguments": "{}",
                },
            ],
        }
    ).chat
    calls = [m["tool_calls"][0]["function"] for m in chat["messages"] if m.get("tool_calls")]
    assert calls == [
        {"name": "apply_patch", "arguments": '{"input":"*** Begin Patch"}'},
        {"name": "multi_agent_v1__spawn", "arguments": "{}"},
    ]


def test_parameters_are_mapped() -> None:
    chat = run(
        {
            "model": "m",
            "input": "x",
            "max_output_tokens": 99,
            "reasoning": {"effort": "high", "summary": "auto"},
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "o",
                    "schema": {"type": "object"},
                    "strict": True,
                }
            },
            "temperature": 0.5,
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
        }
    ).chat
    assert chat["max_tokens"] == 99
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "o", "schema": {"type": "object"}, "strict": True},
    }
    assert chat["temperature"] == 0.5
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}


def test_hints_are_ignored() -> None:
    chat = run(
        {
            "model": "m",
            "input": "x",
            "prompt_cache_key": "k",
            "client_metadata": {"a": 1},
            "include": ["reasoning.encrypted_content"],
            "truncation": "auto",
            "service_tier": "auto",
            "store": False,
        }
    ).chat
    assert set(chat) == {"model", "messages"}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"tool_choice": {"type": "code_interpreter"}}, "tool_choice"),
    ],
)
def test_refused_parameters_are_a_400_naming_them(extra: dict[str, Any], param: str) -> None:
    error = refused({"model": "m", "input": "x", **extra})
    assert error.status == 400
    assert error.body["error"]["code"] == "unsupported_parameter"
    assert error.body["error"]["param"] == param
    assert error.body["error"]["type"] == "invalid_request_error"


def test_an_unknown_previous_response_is_previous_response_not_found() -> None:
    error = refused({"model": "m", "input": "x", "previous_response_id": "resp_nope"})
    assert error.status == 400
    assert error.body["error"]["code"] == "previous_response_not_found"


def test_a_continuation_is_the_stored_transcript_then_the_new_input() -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    before = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    asyncio.run(store.save("resp_1", before[1], before, []))
    translation = run(
        {"model": "m", "input": "next", "previous_response_id": "resp_1", "instructions": "I"},
        lookups(store),
    )
    assert translation.counts == {"responses_previous_response": 1}
    chat = translation.chat
    assert chat["messages"] == [
        {"role": "system", "content": "I"},
        *before,
        {"role": "user", "content": "next"},
    ]


def test_another_tenant_cannot_continue_a_response() -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    asyncio.run(store.save("resp_1", {"role": "assistant"}, [], []))
    other = ResponsesStore(store.store, ReceiptScope("tenant-b", "upstream-1"))
    error = refused({"model": "m", "input": "x", "previous_response_id": "resp_1"}, lookups(other))
    assert error.body["error"]["code"] == "previous_response_not_found"


def test_an_item_reference_resolves_from_the_store_and_an_unknown_one_is_refused() -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{}",
    }
    asyncio.run(store.save("resp_1", {"role": "assistant"}, None, [item]))
    chat = run(
        {
            "model": "m",
            "input": [{"role": "user", "content": "q"}, {"type": "item_reference", "id": "fc_1"}],
        },
        lookups(store),
    ).chat
    assert chat["messages"][1]["tool_calls"][0]["id"] == "call_1"
    counted = run(
        {"model": "m", "input": [{"type": "item_reference", "id": "fc_1"}]}, lookups(store)
    ).counts
    assert counted == {"responses_item_reference": 1}
    error = refused(
        {"model": "m", "input": [{"type": "item_reference", "id": "fc_x"}]}, lookups(store)
    )
    assert error.status == 400


def test_a_reasoning_token_restores_the_turns_receipts() -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    issued = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking...",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": "{}"},
                "extra_content": {"google": {"thought_signature": "SIG"}},
            }
        ],
    }
    asyncio.run(store.save("resp_1", issued, None, []))
    token = receipt_tokens.mint(store.token_scope, "turn:resp_1")
    translation = run(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "r"},
            ],
        },
        lookups(store),
    )
    assistant = translation.chat["messages"][1]
    assert assistant["reasoning_content"] == "thinking..."
    assert assistant["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "SIG"}}
    assert translation.counts["responses_receipts_restored"] == 2


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_a_tampered_or_foreign_token_is_dropped_and_counted(tenant: str) -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    asyncio.run(store.save("resp_1", {"role": "assistant", "reasoning_content": "R"}, None, []))
    token = receipt_tokens.mint(ReceiptScope(tenant, "upstream-1").key(""), "turn:resp_1")
    if tenant == "tenant-a":
        token = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    translation = run(
        {
            "model": "m",
            "input": [
                {"type": "reasoning", "summary": [], "encrypted_content": token},
                {"role": "assistant", "content": "a"},
            ],
        },
        lookups(store),
    )
    assert "reasoning_content" not in translation.chat["messages"][0]
    assert translation.counts == {"responses_foreign_receipt_token": 1}


def test_a_model_is_required() -> None:
    assert refused({"input": "x"}).status == 400


def test_a_valid_token_whose_turn_is_gone_is_counted() -> None:
    store = ResponsesStore(MemoryStore(100, 60), SCOPE)
    token = receipt_tokens.mint(store.token_scope, "turn:resp_expired")
    translation = run(
        {
            "model": "m",
            "input": [
                {"type": "reasoning", "summary": [], "encrypted_content": token},
                {"role": "assistant", "content": "a"},
            ],
        },
        lookups(store),
    )
    assert translation.counts == {"responses_receipt_token_unknown": 1}


def test_a_custom_tools_grammar_is_told_in_its_description() -> None:
    tools = run(
        {
            "model": "m",
            "input": "x",
            "tools": [
                {
                    "type": "custom",
                    "name": "sql",
                    "description": "Write SQL.",
                    "format": {"type": "grammar", "syntax": "regex", "definition": "SELECT .+"},
                }
            ],
        }
    ).chat["tools"]
    assert tools[0]["function"]["description"] == (
        "Write SQL.\n\nThe input must follow this regex grammar:\nSELECT .+"
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": ["message"], "role": "user", "content": "hi"}]}, "input[0].type"),
        ({"input": "hi", "tools": [{"type": {"function": 1}, "name": "f"}]}, "tools[0].type"),
        ({"input": "hi", "tools": [{"name": "f"}]}, "tools[0].type"),
    ],
)
def test_a_type_that_is_not_a_string_is_a_400_naming_it(body: dict[str, Any], param: str) -> None:
    error = refused({"model": "m", **body})
    assert error.status == 400
    assert error.body["error"]["param"] == param


def test_a_forced_tool_choice_whose_type_is_not_a_string_is_a_400() -> None:
    error = refused({"model": "m", "input": "hi", "tool_choice": {"type": ["web_search"]}})
    assert error.status == 400


# ── hostile requests (tests/fronts/test_hostile_requests.py found these) ────


@pytest.mark.parametrize(
    ("body", "param"),
    [
        # an allowed_tools mode that is an object went upstream as chat's tool_choice
        (
            {
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "allowed_tools", "tools": [{"name": "f"}], "mode": {}},
            },
            "tool_choice.mode",
        ),
        # allowed_tools' tools a number: iterated, TypeError
        (
            {
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "allowed_tools", "tools": 5},
            },
            "tool_choice.tools",
        ),
        # a forced function without a name went upstream as {"name": null}
        (
            {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function"}},
            "tool_choice.name",
        ),
        # a custom tool named by a list went upstream, and broke allowed_tools
        ({"tools": [{"type": "custom", "name": ["apply_patch"]}]}, "tools[0].name"),
        ({"tools": [{"type": "custom", "name": "p", "description": [1]}]}, "tools[0].description"),
        # a namespace without a name flattened its members to "None__search"
        ({"tools": [{"type": "namespace", "tools": [{"name": "search"}]}]}, "tools[0].name"),
        (
            {"tools": [{"type": "namespace", "name": "docs", "tools": [{"type": "function"}]}]},
            "tools[0].tools[0].name",
        ),
        ({"tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, "tools[0].parameters"),
        # an item_reference id that is a list: a dict lookup raised TypeError (a 500)
        ({"input": [{"type": "item_reference", "id": ["msg_1"]}]}, "input[0].id"),
        ({"input": [{"type": "item_reference", "id": {"a": 1}}]}, "input[0].id"),
        # an input_image whose url is a number went upstream and into the stored transcript,
        # where an integer past 64 bits broke the store write
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": 2**70}]}]},
            "input[0].content[0].image_url",
        ),
        # a text part's text was str()-ed ("{'a': 1}" went upstream)
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": {"a": 1}}]}]},
            "input[0].content[0].text",
        ),
        # a part that is not an object was dropped without a word
        ({"input": [{"role": "user", "content": ["hi"]}]}, "input[0].content[0]"),
        ({"input": "hi", "previous_response_id": ["resp_1"]}, "previous_response_id"),
    ],
)
def test_a_malformed_field_is_a_400_naming_it(body: dict[str, Any], param: str) -> None:
    error = refused({"model": "m", "input": "hi", **body})
    assert error.status == 400
    assert error.body["error"]["param"] == param
    assert error.body["error"]["code"] == "invalid_value"


def test_an_allowed_tools_choice_keeps_the_named_tools_and_its_mode() -> None:
    chat = run(
        {
            "model": "m",
            "input": "hi",
            "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"name": "g"}]},
        }
    ).chat
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["g"]
    assert chat["tool_choice"] == "required"


def test_an_allowed_tool_named_by_a_list_is_no_name() -> None:
    """A set of the names raised TypeError (unhashable: a 500); such an entry names nothing."""
    chat = run(
        {
            "model": "m",
            "input": "hi",
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "allowed_tools", "tools": [{"name": ["f"]}]},
        }
    ).chat
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["f"]
    assert chat["tool_choice"] == "auto"


def test_a_refusal_quotes_a_long_value_short() -> None:
    """A 70 kB role was repeated whole in the error; a nested one was repr()-ed whole."""
    error = refused({"model": "m", "input": [{"role": "x" * 70_000, "content": "hi"}]})
    assert len(error.body["error"]["message"]) < 200
    error = refused({"model": "m", "input": [{"role": [[[1]]], "content": "hi"}]})
    assert error.body["error"]["message"] == "input[0].role: unknown role an array"


def test_call_arguments_given_as_an_object_keep_an_integer_past_64_bits() -> None:
    """orjson cannot write such an integer: the arguments' text raised TypeError (a 500)."""
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"n": 2**70}}
    chat = run({"model": "m", "input": [call]}).chat
    assert chat["messages"][0]["tool_calls"][0]["function"]["arguments"] == f'{{"n":{2**70}}}'
