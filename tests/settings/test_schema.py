"""Settings precedence and validation, and the command line serving real requests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.settings.schema import GEMINI_OPENAI_BASE_URL, ConfigError, Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxy_process import answers_healthz
from tests.support.servers import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_listen_on_loopback_and_forward_to_gemini() -> None:
    settings = Settings.load(None, {})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8080)
    assert settings.upstream.base_url == GEMINI_OPENAI_BASE_URL
    assert settings.tool_calls.emit == "auto"


def test_shipped_config_file_loads_and_matches_defaults() -> None:
    assert Settings.load(ROOT / "config" / "streamfix.toml", {}) == Settings()


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[server]\nport = 9000\nhost = "0.0.0.0"\n[upstream]\nbase_url = "http://file"\n'
    )
    env = {
        "STREAMFIX_CONFIG": str(config),
        "STREAMFIX_PORT": "9100",
        "STREAMFIX_UPSTREAM": "http://env",
    }
    settings = Settings.load(None, env, {"upstream.base_url": "http://flag", "server.port": None})
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == 9100
    assert settings.upstream.base_url == "http://flag"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nprot = 1\n", "server.prot: unknown config key"),
        ("[sever]\nport = 1\n", "sever: unknown config section"),
        ('[server]\nport = "many"\n', "server.port: expected int"),
        ('[tool_calls]\nemit = "sometimes"\n', "tool_calls.emit"),
        ("[repairs]\nstrict = 3\n", "repairs.strict: expected true or false"),
        ("[server\n", "streamfix.toml"),
    ],
)
def test_invalid_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "streamfix.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Settings.load(config, {})


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-m", "proxy", "serve"], ["streamfix", "serve"]],
    ids=["python -m proxy", "console script"],
)
def test_command_line_serves_with_environment_configuration(command: list[str]) -> None:
    port = free_port()
    with running_fake_upstream() as (fake, upstream):
        env = {**os.environ, "STREAMFIX_UPSTREAM": f"{upstream}/v1", "STREAMFIX_PORT": str(port)}
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            url = f"http://127.0.0.1:{port}"
            healthy = answers_healthz(url, process)
            wait_until(healthy, f"the proxy at {url} to answer /healthz", 15.0, interval=0.1)
            body = {"model": "gemini_indexless_call_stop", "messages": [], "stream": True}
            response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            assert response.status_code == 200
            assert b'"finish_reason":"tool_calls"' in response.content
            assert fake.requests[-1].path == "/v1/chat/completions"
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_command_line_rejects_invalid_config_with_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nport = -3\n")
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "server.port" in result.stderr


def test_receipts_section_is_also_read_under_its_old_name(tmp_path: Path) -> None:
    new = tmp_path / "new.toml"
    new.write_text('[receipts]\nmax_entries = 7\non_missing = "leave"\n')
    old = tmp_path / "old.toml"
    old.write_text('[signatures]\nmax_entries = 7\non_missing = "leave"\n')
    assert Settings.load(new).receipts == Settings.load(old).receipts
    assert Settings.load(old).receipts.max_entries == 7
    assert "signatures" not in Settings().to_dict()  # shown and handed to workers as receipts
    assert Settings.from_dict(Settings.load(old).to_dict()).receipts.max_entries == 7


def test_an_error_under_the_old_section_name_names_the_key_as_written() -> None:
    with pytest.raises(ConfigError, match=r"^signatures\.on_missing: "):
        Settings().with_values({"signatures.on_missing": "guess"})
    with pytest.raises(ConfigError, match=r"^receipts\.on_missing: "):
        Settings().with_values({"receipts.on_missing": "guess"})


def test_receipts_and_its_old_name_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "both.toml"
    path.write_text("[receipts]\nmax_entries = 7\n\n[signatures]\nttl_seconds = 60\n")
    with pytest.raises(ConfigError, match=r"^signatures: the old name of \[receipts\]"):
        Settings.load(path)
