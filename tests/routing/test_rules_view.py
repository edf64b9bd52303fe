"""`streamfix config` shows each route's rules in force, "auto" resolved against its profile."""

from __future__ import annotations

import tomllib

from proxy.cli import main
from proxy.routing.rules_view import rules_in_force
from proxy.settings.schema import Settings

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"


def test_a_gemini_host_shows_its_profiles_rules() -> None:
    shown = rules_in_force(Settings().with_values({"upstream.base_url": GEMINI}).upstream)
    assert shown.startswith("profile gemini; tool schemas gemini; tool names gemini;")
    assert "parameters store dropped, prompt_cache_key dropped" in shown
    assert "developer_role keep" in shown and "rejected parameters learned" in shown


def test_a_route_override_shows_what_it_does_instead() -> None:
    settings = Settings().with_values(
        {
            "routes": [
                {
                    "name": "kimi-gw",
                    "models": ["kimi-*"],
                    "base_url": "http://127.0.0.1:9/v1",
                    "schema_dialect": "moonshot",
                    "tool_names": "none",
                    "developer_role": "system",
                    "learn_rejected_parameters": False,
                    "text_tool_calls": False,
                }
            ]
        }
    )
    shown = rules_in_force(settings.routes[0])
    assert shown.startswith("profile generic; tool schemas moonshot; tool names as sent;")
    assert "developer_role system" in shown and "rejected parameters relayed" in shown
    assert "text tool calls as sent" in shown and "parameters as sent" in shown


def test_streamfix_config_prints_them_as_comments_it_reads_back(capsys, monkeypatch) -> None:
    monkeypatch.setenv("STREAMFIX_UPSTREAM", GEMINI)
    assert main(["config"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if "rules_in_force" in line)
    assert line.startswith("# rules_in_force (shown, not a config key): ")
    assert "tool schemas gemini" in line
    assert "rules_in_force" not in tomllib.loads(text)["upstream"]
