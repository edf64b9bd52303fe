"""The README says what the code does: its first two commands are the serve and test commands,
`.ci/run` runs exactly the second, the code map lists every module once, and every config key
has its row."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.settings.schema import Settings
from proxy.settings.values import flatten

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
