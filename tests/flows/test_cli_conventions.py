"""The conventions every command keeps (issue 28, item 8), in process: each help page says its
exit statuses and shows no empty default; a long default is never cut inside; a usage error
points at the help page of the command it happened in; a misspelt flag, config key or section
gets the nearest real one."""

from __future__ import annotations

import re

import pytest

from proxy.cli import EXIT_CODES, main
from proxy.settings.schema import GEMINI_OPENAI_BASE_URL, Settings
from proxy.settings.values import ConfigError

PAGES = [[], ["serve"], ["replay"], ["explain"], ["config"], ["doctor"]]


def help_page(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", PAGES, ids=lambda c: " ".join(["streamfix", *c]))
def test_every_help_page_says_its_exit_statuses_and_shows_no_empty_default(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    page = help_page(command, capsys, monkeypatch)
    flat = " ".join(page.split())
    assert " ".join(EXIT_CODES[command[0] if command else "streamfix"].split()) in flat
    assert "exit status: 0" in flat and "2 a usage" in flat
    assert "(default: )" not in flat and 'default: ""' not in flat


@pytest.mark.parametrize("columns", ["60", "80", "100"])
def test_the_default_upstream_url_is_never_cut(
    columns: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert any(GEMINI_OPENAI_BASE_URL in line for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize(
    ("argv", "page"),
    [
        (["serve", "--prot", "19510"], "streamfix serve --help"),
        (["serve", "--port", "abc"], "streamfix serve --help"),
        (["config", "--jsn"], "streamfix config --help"),
        (["frobnicate"], "streamfix --help"),
    ],
)
def test_a_usage_error_names_the_help_page_of_its_command(
    argv: list[str], page: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.rstrip().endswith(f"(see {page})")


def test_a_misspelt_flag_gets_the_nearest_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--prot", "19510"])
    assert "; did you mean --port?" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("values", "hint"),
    [
        ({"server.prot": 19510}, "server.prot: unknown config key; did you mean `port`?"),
        (
            {"upstream.bse_url": "x"},
            "upstream.bse_url: unknown config key; did you mean `base_url`?",
        ),
        ({"recieps.store": "memory"}, "recieps: unknown config section; did you mean `receipts`?"),
        ({"server.zzzz": 1}, "server.zzzz: unknown config key"),
    ],
)
def test_an_unknown_config_key_or_section_gets_the_nearest_one(
    values: dict[str, object], hint: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings().with_values(values, text=False)
    assert str(refused.value).startswith(hint)
    if "zzzz" in hint:
        assert "did you mean" not in str(refused.value)


def test_a_misspelt_key_in_a_file_is_one_line_naming_the_file(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "streamfix.toml"
    config.write_text("[server]\nprot = 19510\n")
    assert main(["config", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"streamfix: invalid configuration: server\.prot: unknown config key; did you mean "
        r"`port`\? \(in config file .*\)\n",
        err,
    )
