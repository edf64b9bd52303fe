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
