"""The proxy's own keys (proxy/server/auth.py `parse_keys`, `STREAMFIX_API_KEYS`): a value of
nothing but commas and blanks stops start-up, in-process and for `streamfix serve` (exit 2);
unset or given keys parse as before.

Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from proxy.server.app import Proxy
from proxy.server.auth import parse_keys
from proxy.settings.schema import ConfigError, Settings
from tests.support.servers import free_port


@pytest.mark.parametrize("value", [" , ", "", ",", " ", ",,  ,"])
def test_proxy_keys_set_to_nothing_stop_start_up(value: str) -> None:
    # Before: parsed as no keys, which silently ran the proxy without authentication.
    with pytest.raises(ConfigError, match="STREAMFIX_API_KEYS: set but holds no key"):
        parse_keys(value)
    with pytest.raises(ConfigError, match="STREAMFIX_API_KEYS"):
        Proxy(Settings(), environ={"STREAMFIX_API_KEYS": value})


def test_proxy_keys_unset_or_given_parse_as_before() -> None:
    assert parse_keys(None) == ()
    assert parse_keys(" a, b ,,c ") == ("a", "b", "c")


def test_streamfix_serve_exits_2_on_blank_proxy_keys() -> None:
    # Before: `streamfix serve` started, and served with authentication off (then this run
    # would time out). The real command, on a free loopback port, so nothing of how it starts
    # its server is assumed.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    environ["STREAMFIX_API_KEYS"] = " , "
    command = [sys.executable, "-m", "proxy", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(free_port()), "--upstream", "http://127.0.0.1:9/v1"]
    done = subprocess.run(
        command, env=environ, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "STREAMFIX_API_KEYS: set but holds no key" in done.stderr
