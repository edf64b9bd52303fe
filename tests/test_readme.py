"""The README says what the code does: its first two commands are the serve and test commands,
`.ci/run` runs exactly the second, the code map lists every module once, and every config key
has its row."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.settings.schema import Settings
from proxy.settings.values import flatten
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    serve, tests = shell_blocks(README)[:2]
    assert serve.endswith("python3 -m pip install -e . && streamfix serve")
    assert tests.endswith("python3 -m pip install -e '.[test]' && python3 -m pytest")
    # Nothing but the title and two sentences before them.
    assert README.index("```sh") < README.index("\n## ")
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line.strip()]
    assert ci[-1] == tests


def test_the_code_map_lists_every_module_once() -> None:
    code_map = README[README.index("## How it is built") : README.index("Each repair is one class")]
    listed = re.findall(r"\b([a-z_0-9]+\.py)\b", code_map)
    modules = {path.name for path in (ROOT / "proxy").rglob("*.py")} - {"__init__.py"}
    assert set(listed) - {"__init__.py"} == modules


def test_every_config_key_has_its_row() -> None:
    settings = Settings().to_dict()
    keys = flatten({section: values for section, values in settings.items() if section != "routes"})
    assert keys and all(f"`{key}`" in README for key in keys), [
        key for key in keys if f"`{key}`" not in README
    ]


def profile_table() -> dict[str, str]:
    """The README's one list of profiles: name -> the hosts `auto` picks it for."""
    start = README.index("| profile | `auto` picks it for |")
    rows = README[start:].split("\n\n", 1)[0].splitlines()[2:]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return {cell[0].strip("`"): cell[1] for cell in cells}


def test_the_readme_lists_every_profile_once_with_the_hosts_auto_picks_it_for() -> None:
    from proxy.repair.profiles import PROFILES, profile_for
    from proxy.settings.schema import PROFILE_NAMES

    table = profile_table()
    assert list(table) == list(PROFILES)  # the same list, in the order --help offers it
    assert set(PROFILE_NAMES) == {"auto", *table}
    for name, hosts in table.items():
        for host in re.findall(r"`([a-z0-9.-]+\.[a-z]+)`", hosts):
            assert profile_for("auto", f"https://{host}/v1").name == name, host
            assert profile_for("auto", f"https://eu.{host}/v1").name == name, host
    assert profile_for("auto", "https://gateway.example/v1", "gemini-3-pro").name == "generic"


def test_no_doc_says_the_model_name_picks_a_profile() -> None:
    """One rule for `auto`: the host decides, the model name nothing (profiles.profile_for)."""
    from proxy.settings import schema

    for text in (
        README,
        (ROOT / "config/streamfix.toml").read_text(),
        Path(schema.__file__).read_text(),
    ):
        flat = " ".join(text.split())
        assert "then the model name" not in flat and "else the model name" not in flat
        assert "then model name" not in flat


def replay_check_block() -> str:
    return next(block for block in shell_blocks(README) if "--replay recordings/" in block)


@pytest.mark.parametrize("curl", ["as found", "stand-in"])
def test_the_replay_check_prints_the_repairs_it_promises_when_pasted_as_a_block(
    tmp_path: Path, curl: str
) -> None:
    """The README's no-key check, run by bash as a user pastes it: it waits for `/healthz`
    (the proxy takes a second or more to start), sends a key (else receipts are skipped) and
    stops the proxy. Changed only where a test must: this interpreter instead of `.venv`'s,
    a free port, a scratch file; `curl` is the real one, or tests/support/curl_stand_in.py on
    a machine without it."""
    port = str(free_port())
    script = (
        replay_check_block()
        .replace(".venv/bin/streamfix", f"{shlex.quote(sys.executable)} -m proxy")
        .replace("8081", port)
        .replace("/tmp/req.json", str(tmp_path / "req.json"))
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if curl == "stand-in" or shutil.which("curl") is None:
        stand_in = tmp_path / "bin" / "curl"
        stand_in.parent.mkdir()
        helper = ROOT / "tests/support/curl_stand_in.py"
        stand_in.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {helper} "$@"\n')
        stand_in.chmod(0o755)
        env["PATH"] = f"{stand_in.parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    promised = re.search(r"The stream ends with\n`(: streamfix-repairs [^`]+)`", README)
    assert promised is not None
    lines = done.stdout.rstrip("\n").split("\n")
    assert promised.group(1) in lines, done.stdout[-2000:]
    assert lines[-1] == "data: [DONE]"
    assert "receipts_skipped_no_credential" not in done.stdout


CONTENTS = "## Contents\n"


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens gone, spaces hyphens."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of each `##` and `###` heading outside code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{2,3} ", line) and line != CONTENTS.strip():
            level = line.index(" ")
            found.append((level, line[level + 1 :].strip()))
    return found


def contents(text: str) -> str:
    """The table of contents the README must hold: each `##` section, its `###` ones after it."""
    lines: list[str] = []
    for level, title in headings(text):
        link = f"[{title}](#{slug(title)})"
        if level == 2:
            lines.append(f"- {link}")
        else:
            lines[-1] += (": " if lines[-1].count("](#") == 1 else " · ") + link
    return CONTENTS + "\n" + "\n".join(lines) + "\n"


def test_the_table_of_contents_lists_every_section() -> None:
    start = README.index(CONTENTS)
    held = README[start : README.index("\n## ", start + 1) + 1]
    expected = contents(README)
    assert held.rstrip() == expected.rstrip(), f"the README's contents should read:\n{expected}"
    for _, title in headings(README):  # each anchor is unique, so each link lands
        assert [slug(t) for _, t in headings(README)].count(slug(title)) == 1, title


def test_the_configuration_table_is_generated_from_the_settings() -> None:
    from proxy.settings.reference import BEGIN, END, markdown_table, undocumented

    held = README[README.index(BEGIN) : README.index(END) + len(END)]
    assert held == markdown_table(), "run `python -m proxy.settings.reference` and paste it"
    assert undocumented() == []  # every key's meaning is written with it, in the code


def test_every_key_streamfix_config_prints_is_in_the_configuration_table() -> None:
    from proxy.settings.display import NOTES, masked
    from proxy.settings.reference import BEGIN, END

    table = README[README.index(BEGIN) : README.index(END)]
    document = masked(Settings(), {})
    printed = flatten({k: v for k, v in document.items() if k not in NOTES})
    printed = {key for key in printed if key.split(".")[-1] not in NOTES}
    missing = sorted(k for k in printed if f"`{k}`" not in table and k != "routes")
    assert not missing, missing
    assert "`[[routes]]`" in table
