"""The command line as a user meets it, through `python -m proxy ...` as a real process:

- `--version`, bare `streamfix` (help, exit 0), help texts that show each default with its
  environment variable and config key;
- no traceback anywhere: a bad `--config`, an unknown command, a bad value, a closed pipe each
  give one line on stderr and exit 2 (0 for the pipe);
- `streamfix config` prints TOML that reads back to the same effective settings;
- `--log-level debug` shows each repair as it happens and the upstream request line, never its
  query string.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from proxy import __version__
from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy_process import ROOT, chat, run_cli, serving, write_config
from tests.support.servers import free_port


def one_line_error(code: int, stdout: str, stderr: str) -> str:
    """The refusal a user sees: exit 2, nothing on stdout, one line on stderr."""
    assert code == 2, (code, stderr)
    assert stdout == ""
    assert "Traceback" not in stderr
    assert len(stderr.splitlines()) == 1, stderr
    return stderr


# ── version and help ─────────────────────────────────────────────────────────


def test_version_prints_the_package_version() -> None:
    code, stdout, stderr = run_cli("--version")
    assert (code, stdout, stderr) == (0, f"streamfix {__version__}\n", "")


def test_bare_streamfix_prints_help_and_exits_0() -> None:
    code, stdout, stderr = run_cli()
    assert code == 0, stderr
    assert stdout.startswith("usage: streamfix")
    for command in ("serve", "replay", "explain", "config"):
        assert command in stdout


@pytest.mark.parametrize("command", ["serve", "config"])
def test_help_shows_each_setting_flag_with_its_default_variable_and_key(command: str) -> None:
    code, stdout, _ = run_cli(command, "--help")
    assert code == 0
    text = " ".join(stdout.split())  # argparse wraps help at the terminal width
    assert '(default: "info"; env STREAMFIX_LOG_LEVEL; config server.log_level)' in text
    assert "(default: 8080; env STREAMFIX_PORT; config server.port)" in text
    assert "(default: false; config recording.replay_timing)" in text


def test_every_subcommand_help_shows_defaults() -> None:
    code, stdout, _ = run_cli("explain", "--help")
    assert code == 0 and "(default: auto)" in " ".join(stdout.split())
    code, stdout, _ = run_cli("replay", "--help")
    assert code == 0 and "default: none" in " ".join(stdout.split())


# ── one line, never a traceback ──────────────────────────────────────────────


def test_an_unknown_command_is_one_line() -> None:
    stderr = one_line_error(*run_cli("frobnicate"))
    assert stderr.startswith("streamfix: error: ") and "'frobnicate'" in stderr
    assert "streamfix --help" in stderr


def test_a_bad_flag_value_is_one_line() -> None:
    stderr = one_line_error(*run_cli("serve", "--port", "1.5"))
    assert "--port" in stderr and "streamfix serve --help" in stderr


@pytest.mark.parametrize("command", ["config", "serve", "replay", "explain"])
def test_config_naming_a_directory_is_one_line(tmp_path: Path, command: str) -> None:
    positional = {"replay": [str(tmp_path)], "explain": [str(tmp_path)]}.get(command, [])
    stderr = one_line_error(*run_cli(command, *positional, "--config", str(tmp_path)))
    assert stderr == (
        f"streamfix: invalid configuration: config file {tmp_path} is a directory, "
        "not a TOML file\n"
    )


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[server]\nhost = "caf\xe9"\n'.encode("latin-1"))
    stderr = one_line_error(*run_cli("config", "--config", str(path)))
    assert f"config file {path}: not UTF-8 text" in stderr


def test_a_missing_config_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    stderr = one_line_error(*run_cli("config", "--config", str(missing)))
    assert stderr == f"streamfix: invalid configuration: config file {missing} does not exist\n"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[server]\nworkers = 1.5\n", "server.workers"),
        ("[server]\nport = 19101.9\n", "server.port"),
        ('[server]\nport = "abc"\n', "server.port"),
        ('[history]\nrepair = "yes"\n', "history.repair"),
        ("[repairs]\nenabled = 1\n", "repairs.enabled"),
    ],
)
def test_a_value_of_the_wrong_type_in_the_file_exits_2_naming_the_key(
    tmp_path: Path, text: str, key: str
) -> None:
    config = write_config(tmp_path, text)
    stderr = one_line_error(*run_cli("config", "--config", config))
    assert stderr.startswith(f"streamfix: invalid configuration: {key}: "), stderr
    assert f"(in config file {config})" in stderr


def test_a_bad_file_value_is_reported_even_when_a_flag_overrides_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[server]\nport = 19101.9\n")
    stderr = one_line_error(*run_cli("config", "--config", config, "--port", "9000"))
    assert stderr.startswith("streamfix: invalid configuration: server.port: expected int")


def test_a_closed_pipe_ends_quietly_with_0() -> None:
    """`streamfix config | head -0`, deterministically: the only reader is gone before the
    process writes a byte, so its first write meets EPIPE."""
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "config"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.close()
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0
    assert stderr == b""


def test_config_piped_into_head_prints_one_line_and_no_error() -> None:
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{sys.executable} -m proxy config | head -1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# streamfix effective configuration") and done.stderr == ""


# ── streamfix config: TOML that reads back ───────────────────────────────────


def test_config_toml_fed_back_gives_the_same_effective_settings(tmp_path: Path) -> None:
    original = write_config(
        tmp_path,
        '[server]\nlog_level = "warning"\nshutdown_grace_seconds = 7\n\n'
        '[upstream]\napi_key_env = "STREAMFIX_TEST_KEY"\n\n'
        '[recording]\nsecret_headers = ["x-team", "x-\\"odd\\" name"]\n\n'
        '[[routes]]\nname = "local"\nmodels = ["qwen*", "gemma-?"]\n'
        'base_url = "http://127.0.0.1:8000/v1"\nprofile = "vllm"\n'
        'api_key_env = "STREAMFIX_TEST_KEY"\n\n'
        '[[routes]]\nname = "kimi"\nmodels = ["kimi-*"]\n'
        'base_url = "https://api.moonshot.ai/v1"\n',
    )
    env = {
        "STREAMFIX_TEST_KEY": "k-never-printed",
        "STREAMFIX_API_KEYS": "pk-one-never-printed,pk-2",
    }
    code, printed, stderr = run_cli("config", "--config", original, "--workers", "1", env=env)
    assert code == 0, stderr
    assert "k-never-printed" not in printed and "pk-one" not in printed
    document = tomllib.loads(printed)  # valid TOML
    assert "api_key" not in document["upstream"]  # shown as a comment only
    assert "proxy_api_keys" not in document
    assert "# proxy_api_keys (shown, not a config key): " in printed
    fed_back = tmp_path / "fed-back.toml"
    fed_back.write_text(printed)

    def effective(*args: str) -> dict:
        code, stdout, stderr = run_cli("config", "--json", *args, env=env)
        assert code == 0, stderr
        return json.loads(stdout)

    before = effective("--config", original)
    assert before == effective("--config", str(fed_back))
    assert before["server"]["log_level"] == "warning"
    assert [route["name"] for route in before["routes"]] == ["local", "kimi"]


def test_config_toml_keeps_a_masked_secret_masked(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[receipts]\nstore = "redis://:hunter2@127.0.0.1:6390/2"\n')
    code, printed, stderr = run_cli("config", "--config", config)
    assert code == 0, stderr
    assert "hunter2" not in printed
    assert tomllib.loads(printed)["receipts"]["store"] == "redis://****@127.0.0.1:6390/2"


# ── --log-level debug ────────────────────────────────────────────────────────


def test_debug_logs_each_repair_and_the_upstream_request_line_without_its_query(
    fake_upstream: tuple[FakeUpstream, str],
) -> None:
    fake, root = fake_upstream
    with serving("--upstream", f"{root}/v1", env={"STREAMFIX_LOG_LEVEL": "debug"}) as proxy:
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions?key=query-secret-never-logged",
            json=chat("gemini_indexless_call_stop"),
            headers={"x-request-id": "debug-id-7", "authorization": "Bearer header-secret"},
            timeout=10,
        )
        assert response.status_code == 200
        upstream = root.removeprefix("http://")
        proxy.wait_for_log(f"[debug-id-7] upstream POST http://{upstream}/v1/chat/completions")
        proxy.wait_for_log("[debug-id-7] signatures_captured +1")
        proxy.wait_for_log("[debug-id-7] POST /v1/chat/completions")  # the exchange line
    assert "query-secret-never-logged" not in proxy.output
    assert "header-secret" not in proxy.output
    assert fake.requests[-1].path.startswith("/v1/chat/completions")


def test_info_logs_no_debug_lines(fake_upstream: tuple[FakeUpstream, str]) -> None:
    _, root = fake_upstream
    with serving("--upstream", f"{root}/v1") as proxy:
        headers = {"x-request-id": "info-id-8", "authorization": "Bearer k"}
        body = chat("gemini_indexless_call_stop")
        httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=10)
        proxy.wait_for_log("[info-id-8] POST /v1/chat/completions")
    assert "upstream POST" not in proxy.output
    assert "+1" not in proxy.output


def test_serve_refuses_a_bad_log_level_from_the_environment() -> None:
    code, stdout, stderr = run_cli(
        "serve", "--port", str(free_port()), env={"STREAMFIX_LOG_LEVEL": "loud"}
    )
    stderr = one_line_error(code, stdout, stderr)
    assert "server.log_level" in stderr and "STREAMFIX_LOG_LEVEL" in stderr
