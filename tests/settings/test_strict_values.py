"""Config values are strict: a TOML value must have its key's type, the environment's strings are
parsed, and each source (file, environment, flags) is checked on its own, so a bad value in the
file is reported even when a flag sets the same key. Through `Settings.load`; the same cases
through the real command line are in tests/flows/test_cli.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.settings.schema import ConfigError, Settings

# (TOML line under its section, the key the error must name)
REFUSED_IN_TOML = [
    ("[server]\nworkers = 1.5", "server.workers: expected int"),
    ("[server]\nport = 19101.9", "server.port: expected int"),
    ('[server]\nport = "abc"', "server.port: expected int"),
    ('[server]\nport = "8080"', "server.port: expected int"),  # quoted: a string, not a number
    ("[server]\nworkers = true", "server.workers: expected int"),  # a bool is no number
    ("[server]\nshutdown_grace_seconds = false", "server.shutdown_grace_seconds: expected float"),
    ('[server]\nshutdown_grace_seconds = "30"', "server.shutdown_grace_seconds: expected float"),
    ("[server]\nshutdown_grace_seconds = nan", "server.shutdown_grace_seconds: must be a finite"),
    ("[server]\nhost = 127", "server.host: expected str"),
    ('[history]\nrepair = "yes"', "history.repair: expected true or false"),
    ("[repairs]\nenabled = 1", "repairs.enabled: expected true or false"),
    ('[[routes]]\nname = "a"\nmodels = ["q*"]\nread_timeout = true', "routes[0].read_timeout"),
    ('[recording]\nsecret_headers = "x-a"', "recording.secret_headers: expected a list"),
    ("[server]\nkeepalive_seconds = -1", "server.keepalive_seconds: must be positive or 0 (off)"),
    ("[server]\nshutdown_grace_seconds = 0", "server.shutdown_grace_seconds: must be positive,"),
]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "streamfix.toml"
    path.write_text(text + "\n")
    return path


@pytest.mark.parametrize(("text", "message"), REFUSED_IN_TOML)
def test_a_toml_value_of_the_wrong_type_is_refused_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        Settings.load(path, {})
    assert str(refused.value).startswith(message)
    assert f"(in config file {path})" in str(refused.value)


def test_toml_values_of_the_right_type_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[server]\nport = 9000\nshutdown_grace_seconds = 5\nkeepalive_timeout_seconds = 2.5\n"
        "[history]\nrepair = false\n[repairs]\nenabled = false",
    )
    settings = Settings.load(path, {})
    assert settings.server.port == 9000
    assert settings.server.shutdown_grace_seconds == 5.0  # an int is a fine float
    assert isinstance(settings.server.shutdown_grace_seconds, float)
    assert settings.server.keepalive_timeout_seconds == 2.5
    assert (settings.history.repair, settings.repairs.enabled) == (False, False)


def test_environment_strings_are_parsed_as_before() -> None:
    env = {"STREAMFIX_PORT": "9001", "STREAMFIX_WORKERS": "2", "STREAMFIX_HOST": "0.0.0.0"}
    server = Settings.load(None, env).server
    assert (server.port, server.workers, server.host) == (9001, 2, "0.0.0.0")
    # Strings for bool keys keep the lenient spellings wherever text is the source.
    for text, expected in [("yes", True), ("OFF", False), ("1", True), ("false", False)]:
        assert Settings().with_values({"history.repair": text}).history.repair is expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STREAMFIX_WORKERS": "1.5"}, "server.workers: expected int"),
        ({"STREAMFIX_PORT": "abc"}, "server.port: expected int"),
        ({"STREAMFIX_PORT": "0"}, "server.port: must be positive"),
        ({"STREAMFIX_LOG_LEVEL": "loud"}, "server.log_level: must be one of"),
    ],
)
def test_a_bad_environment_value_names_the_key_and_the_variable(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.load(None, env)
    text = str(refused.value)
    assert text.startswith(message), text
    assert text.endswith(f"(from the environment, {next(iter(env))})"), text


def test_a_bad_file_value_is_reported_even_when_a_flag_overrides_it(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 19101.9")
    with pytest.raises(ConfigError, match=r"^server\.port: expected int.*\(in config file "):
        Settings.load(path, {}, {"server.port": 9000})


def test_a_bad_file_value_is_reported_even_when_the_environment_overrides_it(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, '[history]\nrepair = "yes"')
    with pytest.raises(ConfigError, match=r"^history\.repair: expected true or false"):
        Settings.load(path, {"STREAMFIX_WORKERS": "1"})
    path = write(tmp_path, "[server]\nworkers = 1.5")
    with pytest.raises(ConfigError, match=r"^server\.workers: .*\(in config file "):
        Settings.load(path, {"STREAMFIX_WORKERS": "1"})


def test_a_bad_flag_value_says_it_came_from_the_command_line() -> None:
    with pytest.raises(ConfigError, match=r"^server\.port: .*\(from the command line\)$"):
        Settings.load(None, {}, {"server.port": 70000})


def test_each_source_overrides_the_one_below_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = 9000\nworkers = 2\nlog_level = "warning"')
    env = {"STREAMFIX_PORT": "9100", "STREAMFIX_LOG_LEVEL": "error"}
    server = Settings.load(path, env, {"server.log_level": "debug"}).server
    assert (server.port, server.workers, server.log_level) == (9100, 2, "debug")


def test_log_level_is_a_setting_with_its_variable() -> None:
    assert Settings().server.log_level == "info"
    assert Settings.load(None, {"STREAMFIX_LOG_LEVEL": "debug"}).server.log_level == "debug"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp, "is a directory, not a TOML file"),
        (lambda tmp: tmp / "missing.toml", "does not exist"),
        (lambda tmp: write(tmp, "").parent / "latin1.toml", "not UTF-8 text"),
    ],
    ids=["directory", "missing", "not-utf8"],
)
def test_an_unreadable_config_file_is_one_config_error(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    (tmp_path / "latin1.toml").write_bytes('[server]\nhost = "café"\n'.encode("latin-1"))
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=message):
        Settings.load(path, {})


def test_keepalive_seconds_zero_is_off_and_the_store_comes_from_the_environment(
    tmp_path: Path,
) -> None:
    # 0 is "never" for this one number only; the store's URL may carry a password, so the
    # environment can give it instead of the file.
    settings = Settings.load(write(tmp_path, "[server]\nkeepalive_seconds = 0"), {})
    assert settings.server.keepalive_seconds == 0.0
    store = "redis://:secret@10.0.0.1:6379/0"
    assert Settings.load(None, {"STREAMFIX_RECEIPTS_STORE": store}).receipts.store == store
