"""The packages' layering, bottom to top: wire < repair < settings < upstream < server < the
commands (explain, doctor, replay_check, cli). A module may import its own layer and the ones
below it, never one above: a lower layer that reaches up ties what should be reusable (the
repairs, under any front) to what is built on it. Every import counts, those inside functions
and under TYPE_CHECKING too: they are dependencies all the same."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy

PACKAGE = Path(proxy.__file__).parent

LAYERS = {
    "proxy": 0,  # the package's own __init__: a docstring and the version
    "proxy.wire": 0,
    "proxy.store": 1,  # what is kept between exchanges, for every room above
    "proxy.repair": 2,
    "proxy.settings": 3,
    "proxy.upstream": 4,  # the transport and the recording seam
    "proxy.learning": 5,  # what an upstream's refusals and answers teach
    "proxy.routing": 5,
    "proxy.fronts": 6,  # translators around the core (FRONTS.md); the server wires them
    "proxy.server": 7,
    "proxy.explain": 8,
    "proxy.doctor": 8,
    "proxy.replay_check": 8,
    "proxy.cli": 8,
    "proxy.__main__": 8,
}

ALLOWED: set[tuple[str, str]] = set()
"""(importing module, imported module) pairs that go upward today; none left."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    """The layer of the longest prefix of `module` that LAYERS names."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module}: in no layer; add its package to LAYERS")


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                names.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.add(node.module)
    return {name for name in names if name == "proxy" or name.startswith("proxy.")}


def upward_imports() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for imported in _imported(tree, module, path.name == "__init__.py"):
            if _layer(imported) > _layer(module) and (module, imported) not in ALLOWED:
                found.append((module, imported))
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_the_repairs_never_import_the_settings() -> None:
    # The one arrow that ran back up (issue 25): the settings embed the route rules' keys.
    assert not [pair for pair in upward_imports() if pair[0].startswith("proxy.repair")]
    assert _layer("proxy.repair.rules") < _layer("proxy.settings.schema")


def test_every_module_is_in_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        _layer(_module_name(path))


def test_an_upward_import_is_caught() -> None:
    tree = ast.parse("from proxy.settings.schema import Settings\nimport proxy.server.app\n")
    imported = _imported(tree, "proxy.repair.example", is_package=False)
    assert imported == {"proxy.settings.schema", "proxy.server.app"}
    assert all(_layer(name) > _layer("proxy.repair.example") for name in imported)
