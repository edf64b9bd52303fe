"""The renaming of tool names an upstream rejects (proxy/repair/calls/tool_names.py)."""

from __future__ import annotations

import copy
import re

import orjson
import pytest

from proxy.repair.calls.tool_names import TOOL_NAME_RULES, rename_request, renaming

OPENAI, GEMINI = TOOL_NAME_RULES["openai"], TOOL_NAME_RULES["gemini"]
# The rules as the upstreams' own errors state them (the module docstring cites them).
OPENAI_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")
GEMINI_PATTERN = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}")
PATTERNS = {"openai": OPENAI_PATTERN, "gemini": GEMINI_PATTERN}

LONG = "mcp__enterprise-database-management__synchronize-all-customer-data-across-systems"
AWKWARD = [
    "files.read",
    "files/read",
    "mcp/server/read",
    "server.tool",
    "2fa_login",
    "read file",
    "",
    "lire_le_fichier_é",
    "ns:tool",
    LONG,
    LONG + "_v2",
    "a" * 64,
    "a" * 65,
    "a" * 200,
]


@pytest.mark.parametrize("rule", ["openai", "gemini"])
def test_every_new_name_is_accepted_and_unique(rule: str) -> None:
    mapping = renaming(AWKWARD, TOOL_NAME_RULES[rule])
    kept = [name for name in AWKWARD if name not in mapping]
    assert all(PATTERNS[rule].fullmatch(name) for name in kept), kept
    assert all(PATTERNS[rule].fullmatch(new) for new in mapping.values()), mapping
    final = [mapping.get(name, name) for name in AWKWARD]
    assert len(set(final)) == len(AWKWARD), final


def test_what_each_upstream_accepts_is_left() -> None:
    assert renaming(["files_read", "get-weather", "a" * 64, "9lives"], OPENAI) == {}
    assert renaming(["files.read", "ns:tool", "_x", "a-b"], GEMINI) == {}
    assert "9lives" in renaming(["9lives"], GEMINI)  # a leading digit: Gemini refuses it
    assert "files.read" in renaming(["files.read"], OPENAI)


def test_the_new_names_read_like_the_old() -> None:
    assert renaming(["files.read", "mcp/server/read", "read file"], OPENAI) == {
        "files.read": "files_read",
        "mcp/server/read": "mcp_server_read",
        "read file": "read_file",
    }
    assert renaming(["2fa_login", "mcp/server/read"], GEMINI) == {
        "2fa_login": "_2fa_login",
        "mcp/server/read": "mcp_server_read",
    }


def test_a_long_name_is_cut_with_a_hash_so_two_long_names_stay_apart() -> None:
    mapping = renaming([LONG, LONG + "_v2"], OPENAI)
    assert all(len(new) == 64 for new in mapping.values())
    assert mapping[LONG] != mapping[LONG + "_v2"]
    assert mapping[LONG].startswith(LONG[:50])


def test_the_same_name_gets_the_same_new_name_whatever_the_order() -> None:
    first = renaming(AWKWARD, GEMINI)
    assert renaming(list(reversed(AWKWARD)), GEMINI) == first
    assert renaming(AWKWARD, GEMINI) == first
    assert renaming(["files.read"], OPENAI) == renaming(["x", "files.read", "y"], OPENAI)


def test_a_new_name_never_takes_a_name_the_client_declared() -> None:
    mapping = renaming(["files.read", "files_read", "files/read"], OPENAI)
    assert "files_read" not in mapping
    assert set(mapping) == {"files.read", "files/read"}
    assert len({*mapping.values(), "files_read"}) == 3
    # Sorted order decides which gets the plain form: here "files.read" ('.' < '/').
    plain = renaming(["files/read", "files.read"], OPENAI)
    assert plain["files.read"] == "files_read" and plain["files/read"] != "files_read"


def test_renaming_the_new_names_changes_nothing() -> None:
    for rule in (OPENAI, GEMINI):
        mapping = renaming(AWKWARD, rule)
        assert renaming([mapping.get(name, name) for name in AWKWARD], rule) == {}


def request() -> dict:
    tool = {"type": "function", "function": {"name": "files.read", "parameters": {}}}
    return {
        "model": "m",
        "tools": [tool, {"type": "function", "function": {"name": "ok_tool"}}],
        "tool_choice": {"type": "function", "function": {"name": "files.read"}},
        "messages": [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "files.read", "arguments": "{}"},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "old/tool", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "files.read", "content": "x"},
        ],
    }


def test_the_request_is_renamed_in_the_tools_the_history_and_tool_choice() -> None:
    body = request()
    mapping = rename_request(body, OPENAI)
    assert mapping == {"files.read": "files_read", "old/tool": "old_tool"}
    assert [t["function"]["name"] for t in body["tools"]] == ["files_read", "ok_tool"]
    assert body["tool_choice"]["function"]["name"] == "files_read"
    calls = body["messages"][1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["files_read", "old_tool"]
    assert body["messages"][2]["name"] == "files_read"
    everything_else = request()
    assert body["messages"][0] == everything_else["messages"][0]
    assert body["tools"][0]["function"]["parameters"] == {}


def test_allowed_tools_are_renamed_too() -> None:
    body = {
        "tools": [{"type": "function", "function": {"name": "a.b"}}],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "a.b"}}],
            },
        },
    }
    rename_request(body, OPENAI)
    assert body["tool_choice"]["allowed_tools"]["tools"][0]["function"]["name"] == "a_b"


def test_a_request_whose_names_are_all_accepted_is_not_touched() -> None:
    body = request()
    for tool in body["tools"]:
        tool["function"]["name"] = tool["function"]["name"].replace(".", ":")
    for message in body["messages"]:
        for call in message.get("tool_calls", ()):
            call["function"]["name"] = call["function"]["name"].replace("/", "-")
        if "name" in message:
            message["name"] = "files:read"
    body["tool_choice"]["function"]["name"] = "files:read"
    raw = orjson.dumps(body)
    before = copy.deepcopy(body)
    assert rename_request(body, GEMINI) == {}
    assert orjson.dumps(body) == raw and body == before


def test_malformed_entries_are_passed_over() -> None:
    body = {
        "tools": [None, "x", {"type": "function"}, {"function": {"name": 3}}],
        "messages": ["x", {"role": "assistant", "tool_calls": [None, {"function": "f"}]}],
        "tool_choice": "auto",
    }
    before = copy.deepcopy(body)
    assert rename_request(body, OPENAI) == {}
    assert body == before
