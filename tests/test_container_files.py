"""Static checks of Dockerfile, docker-compose.yml and .dockerignore (no Docker engine here).

What can be checked without building: the base image and layer order, the unprivileged user,
the port and address, that every file the Dockerfile copies exists and is not ignored, that its
ENTRYPOINT + CMD is a command line the CLI accepts, that the configuration the image points at
loads, and that the health check command really answers 0 against a running proxy and non-zero
without one. The compose file must parse, wire Open WebUI to the proxy's service name and port,
and point the `redis` profile's config file at the `redis` service.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from proxy.settings.schema import ENVIRONMENT_KEYS, Settings
from tests.support.proxies import running_proxy
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERIGNORE = ROOT / ".dockerignore"

# STREAMFIX_* variables the proxy reads besides the config keys' ones.
OTHER_VARIABLES = {"STREAMFIX_CONFIG", "STREAMFIX_API_KEYS"}
KNOWN_VARIABLES = set(ENVIRONMENT_KEYS) | OTHER_VARIABLES
CONTAINER_PORT = 8080
CONSTRAINTS_PATH = "config/constraints.txt"
CONSTRAINTS = ROOT / CONSTRAINTS_PATH


# ── a small Dockerfile reader ────────────────────────────────────────────────


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    stage: int

    @property
    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form instruction (fails the test for the shell form)."""
        text = self.arguments
        if self.keyword == "HEALTHCHECK":
            text = text.split(" CMD ", 1)[1]
        value = json.loads(text)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
        return value


def read_dockerfile() -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped, numbered by stage."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, arguments.strip(), stage))
    assert not pending, "the Dockerfile ends in a continuation line"
    return instructions


def stages() -> list[list[Instruction]]:
    instructions = read_dockerfile()
    count = max(i.stage for i in instructions) + 1
    return [[i for i in instructions if i.stage == n] for n in range(count)]


def final_stage() -> list[Instruction]:
    return stages()[-1]


def only(stage: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in stage if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the final stage, got {found}"
    return found[0]


def image_environment() -> dict[str, str]:
    """ENV of the final stage, `KEY=value` pairs (values without spaces or quotes)."""
    environment: dict[str, str] = {}
    for instruction in final_stage():
        if instruction.keyword == "ENV":
            for pair in shlex.split(instruction.arguments):
                key, sep, value = pair.partition("=")
                assert sep, f"ENV {instruction.arguments!r}: use the KEY=value form"
                environment[key] = value
    return environment


def copy_sources(instruction: Instruction) -> tuple[list[str], str]:
    """(sources, destination) of a COPY from the build context."""
    words = [w for w in shlex.split(instruction.arguments) if not w.startswith("--")]
    return words[:-1], words[-1]


def context_copies() -> list[Instruction]:
    return [i for i in read_dockerfile() if i.keyword == "COPY" and "--from=" not in i.arguments]


def image_path_on_host(path: str) -> Path:
    """The file of the build context that ends up at `path` inside the image."""
    for instruction in context_copies():
        sources, destination = copy_sources(instruction)
        for source in sources:
            if destination.endswith("/") and source.endswith("/"):
                if path.startswith(destination):
                    return ROOT / source / path.removeprefix(destination)
            elif path == destination or path == destination.rstrip("/") + "/" + Path(source).name:
                return ROOT / source
    pytest.fail(f"no COPY puts anything at {path}")


# ── the Dockerfile ───────────────────────────────────────────────────────────


def test_every_stage_is_the_same_slim_python_the_tests_run_on_pinned_to_a_patch() -> None:
    # A bare `python:3.12-slim` moved under the image with every rebuild, and was a minor
    # version the tests never ran on. Now: one patch release, in both stages, of the minor
    # version this test suite is running on.
    images = {stage[0].arguments.split()[0] for stage in stages()}
    assert len(images) == 1, images
    image = images.pop()
    match = re.fullmatch(r"python:(3)\.(\d+)\.(\d+)-slim(-[a-z]+)?", image)
    assert match, f"{image}: not python:3.X.Y-slim"
    assert (int(match.group(1)), int(match.group(2))) == sys.version_info[:2], image
    comments = DOCKERFILE.read_text()
    assert f"the tests run on {sys.version_info[0]}.{sys.version_info[1]}" in comments


def test_dependencies_are_installed_in_a_layer_before_the_source_is_copied() -> None:
    instructions = read_dockerfile()
    source_copy = next(
        n
        for n, i in enumerate(instructions)
        if i.keyword == "COPY" and "proxy" in copy_sources(i)[0]
    )
    installs = [
        (n, i)
        for n, i in enumerate(instructions)
        if i.keyword == "RUN" and "pip install" in i.arguments
    ]
    assert installs, "no pip install at all"
    # The package itself is installed after its source is copied, resolving and fetching
    # nothing: the dependencies are the pinned ones of the layer before.
    package = [(n, i) for n, i in installs if n > source_copy]
    assert len(package) == 1, package
    arguments = package[0][1].arguments
    for flag in ("--no-deps", "--no-index", "--no-build-isolation", "--no-cache-dir"):
        assert flag in arguments, f"the package install lacks {flag}"
    assert re.search(r"pip install .* \.( |$)", arguments), arguments
    assert "pip check" in arguments
    installs = [(n, i) for n, i in installs if n < source_copy]
    for n, install in installs:
        copied = [
            source
            for i in instructions[:n]
            if i.keyword == "COPY" and i.stage == install.stage and "--from=" not in i.arguments
            for source in copy_sources(i)[0]
        ]
        assert copied == ["pyproject.toml", CONSTRAINTS_PATH], f"the layer depends on {copied}"
        # Binary wheels only: nothing is compiled, so no compiler is needed or left behind.
        assert "--only-binary=:all:" in install.arguments
        assert "--no-cache-dir" in install.arguments
        assert f"-c {CONSTRAINTS_PATH}" in install.arguments


def test_no_compiler_or_package_manager_install() -> None:
    runs = " ".join(i.arguments for i in read_dockerfile() if i.keyword == "RUN")
    for word in ("apt-get install", "apt install", "gcc", "g++", "build-essential", "clang"):
        assert word not in runs


def test_runs_as_an_unprivileged_user() -> None:
    user = only(final_stage(), "USER").arguments
    uid, _, gid = user.partition(":")
    assert uid not in ("root", "0") and gid not in ("root", "0"), user
    # Numeric, so `runAsNonRoot` can verify it, and the same uid useradd created.
    assert uid.isdigit()
    created = " ".join(i.arguments for i in final_stage() if i.keyword == "RUN")
    assert f"useradd --system --uid {uid}" in created
    # Nothing runs as root after the switch.
    keywords = [i.keyword for i in final_stage()]
    assert "RUN" not in keywords[keywords.index("USER") :]


def test_listens_on_all_interfaces_on_the_exposed_port() -> None:
    environment = image_environment()
    assert environment["STREAMFIX_HOST"] == "0.0.0.0"
    assert environment["STREAMFIX_PORT"] == str(CONTAINER_PORT)
    assert only(final_stage(), "EXPOSE").arguments == str(CONTAINER_PORT)
    streamfix = {key for key in environment if key.startswith("STREAMFIX_")}
    assert streamfix <= KNOWN_VARIABLES, streamfix - KNOWN_VARIABLES


def test_every_copied_file_exists_and_is_not_ignored() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns), "this check knows no exceptions"
    for instruction in context_copies():
        for source in copy_sources(instruction)[0]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            parts = Path(source.rstrip("/")).parts
            prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
            for pattern in patterns:
                pattern = pattern.removeprefix("**/")
                ignored = [p for p in prefixes if fnmatch.fnmatch(p, pattern)]
                assert not ignored, f"COPY {source}: excluded by .dockerignore {pattern!r}"


def test_the_image_configuration_loads() -> None:
    """`streamfix config` with the image's environment and the file it points at."""
    environment = image_environment()
    config = image_path_on_host(environment["STREAMFIX_CONFIG"])
    assert config == ROOT / "config" / "streamfix.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    env.update({k: v for k, v in environment.items() if k.startswith("STREAMFIX_")})
    env["STREAMFIX_CONFIG"] = str(config)
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "config", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["server"]
    assert (server["host"], server["port"]) == ("0.0.0.0", CONTAINER_PORT)


def test_entrypoint_and_cmd_are_a_command_line_the_cli_accepts() -> None:
    entrypoint = only(final_stage(), "ENTRYPOINT").exec_form
    command = only(final_stage(), "CMD").exec_form
    # The installed command (the image runs `pip install .`); `python -m proxy` runs the same
    # main (proxy/__main__.py), which is how it is checked here without installing.
    assert entrypoint == ["streamfix"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"streamfix": "proxy.cli:main"}
    assert "from proxy.cli import main" in (ROOT / "proxy" / "__main__.py").read_text()
    # Nothing on PYTHONPATH: the package is imported from the venv, not from a source copy.
    assert "PYTHONPATH" not in image_environment()
    assert not [i for i in final_stage() if i.keyword == "COPY" and "proxy" in i.arguments]
    assert command[0] == "serve"
    done = subprocess.run(
        [sys.executable, "-m", "proxy", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: streamfix serve")
    # The documented `docker run IMAGE config` uses the same entrypoint.
    assert (
        "config"
        in subprocess.run(
            [sys.executable, "-m", "proxy", "--help"], cwd=ROOT, capture_output=True, text=True
        ).stdout
    )


def run_health_check(command: list[str], port: int) -> int:
    assert command[0] == "python"
    env = {**os.environ, "STREAMFIX_PORT": str(port)}
    return subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30
    ).returncode


def dockerfile_health_check() -> list[str]:
    healthcheck = only(final_stage(), "HEALTHCHECK")
    form = healthcheck.exec_form
    assert "/healthz" in form[-1]
    return form


def test_health_check_answers_for_a_running_proxy_and_fails_without_one() -> None:
    command = dockerfile_health_check()
    # The port the server listens on: the variable the settings read, defaulting to the image's.
    assert ENVIRONMENT_KEYS["STREAMFIX_PORT"] == "server.port"
    assert f"os.environ.get('STREAMFIX_PORT', '{CONTAINER_PORT}')" in command[-1]
    with running_proxy("http://127.0.0.1:9/v1") as url:
        assert run_health_check(command, int(url.rsplit(":", 1)[1])) == 0
    assert run_health_check(command, free_port()) != 0


# ── docker-compose.yml ───────────────────────────────────────────────────────


def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


def services() -> dict[str, Any]:
    return compose()["services"]


def interpolate(value: str, variables: dict[str, str] | None = None) -> str:
    """Compose's `${NAME}` and `${NAME:-default}`, with nothing set unless given."""
    variables = variables or {}

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        return variables.get(name) or (default if default is not None else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", substitute, value)


def test_compose_services_and_profiles() -> None:
    document = compose()
    assert set(document["services"]) == {"streamfix", "open-webui", "redis"}
    assert "profiles" not in document["services"]["streamfix"]
    assert "profiles" not in document["services"]["open-webui"]
    assert document["services"]["redis"]["profiles"] == ["redis"]
    assert set(document["volumes"]) == {"open-webui", "redis-data"}


def test_compose_streamfix_builds_this_dockerfile_and_publishes_on_loopback_only() -> None:
    streamfix = services()["streamfix"]
    assert (ROOT / streamfix["build"] / "Dockerfile").resolve() == DOCKERFILE
    assert streamfix["ports"] == [f"127.0.0.1:{CONTAINER_PORT}:{CONTAINER_PORT}"]
    for name, service in services().items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    environment = {k: interpolate(v) for k, v in streamfix["environment"].items()}
    assert set(environment) <= KNOWN_VARIABLES, set(environment) - KNOWN_VARIABLES
    environment["STREAMFIX_CONFIG"] = str(image_path_on_host(environment["STREAMFIX_CONFIG"]))
    settings = Settings.load(None, environment)  # the defaults compose passes are valid
    assert settings.server.workers == 1
    assert settings.upstream.base_url == Settings().upstream.base_url


def test_compose_health_check_is_the_images_and_answers() -> None:
    healthcheck = services()["streamfix"]["healthcheck"]
    assert healthcheck["test"] == ["CMD", *dockerfile_health_check()]
    with running_proxy("http://127.0.0.1:9/v1") as url:
        assert run_health_check(healthcheck["test"][1:], int(url.rsplit(":", 1)[1])) == 0


def test_compose_stop_grace_outlasts_the_shutdown_grace() -> None:
    grace = services()["streamfix"]["stop_grace_period"]
    match = re.fullmatch(r"(\d+)s", grace)
    assert match, grace
    assert int(match.group(1)) > Settings().server.shutdown_grace_seconds


def test_compose_open_webui_is_wired_to_the_proxy() -> None:
    webui = services()["open-webui"]
    environment = webui["environment"]
    assert environment["OPENAI_API_BASE_URL"] == f"http://streamfix:{CONTAINER_PORT}/v1"
    assert environment["ENABLE_PERSISTENT_CONFIG"] == "False"
    assert webui["depends_on"] == {"streamfix": {"condition": "service_healthy"}}


def test_compose_open_webui_is_a_release_tag() -> None:
    # `:main` is Open WebUI's moving development build: `docker compose pull` could bring a
    # different, unreleased Open WebUI on any day. A release tag changes only when edited.
    image = services()["open-webui"]["image"]
    assert re.fullmatch(r"ghcr\.io/open-webui/open-webui:v\d+\.\d+\.\d+", image), image


@pytest.mark.parametrize("file", ["streamfix.toml", "streamfix.redis.toml"])
def test_compose_config_files_exist_and_load(file: str) -> None:
    streamfix = services()["streamfix"]
    assert "./config:/etc/streamfix:ro" in streamfix["volumes"]
    path = interpolate(
        streamfix["environment"]["STREAMFIX_CONFIG"], {"STREAMFIX_CONFIG_FILE": file}
    )
    assert path == f"/etc/streamfix/{file}"
    settings = Settings.load(ROOT / "config" / file)
    # The image has the same files (COPY config/ /etc/streamfix/).
    assert image_path_on_host(path) == ROOT / "config" / file
    if file == "streamfix.toml":
        assert interpolate(streamfix["environment"]["STREAMFIX_CONFIG"]) == path
        assert settings.receipts.store == "memory"


def test_compose_redis_profile_is_the_store_of_its_config_file() -> None:
    store = Settings.load(ROOT / "config" / "streamfix.redis.toml").receipts.store
    assert re.fullmatch(r"redis://redis:6379/\d+", store), store
    assert "redis" in services()
    depends = services()["streamfix"]["depends_on"]["redis"]
    assert depends == {"condition": "service_healthy", "required": False}
    assert services()["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    # The same file lets several workers start (the memory store would be refused).
    with_workers = Settings.load(
        ROOT / "config" / "streamfix.redis.toml", {"STREAMFIX_WORKERS": "2"}
    )
    assert with_workers.server.workers == 2


def test_pyproject_dependencies_are_what_the_image_installs() -> None:
    """The Dockerfile reads [project].dependencies; the list must be plain requirement lines."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dependencies and all(isinstance(d, str) and "\n" not in d for d in dependencies)
    runs = " ".join(i.arguments for i in read_dockerfile() if i.keyword == "RUN")
    assert "['project']['dependencies']" in runs


# ── config/constraints.txt: the image's pinned versions ─────────────────────


def pins() -> dict[str, Version]:
    """Name (normalised) to version of every `name==version` line of the constraints file."""
    pinned: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier  # exactly one `==`, no range
        assert specifier.operator == "==" and not requirement.extras, line
        name = canonicalize_name(requirement.name)
        assert name not in pinned, f"{name} pinned twice"
        pinned[name] = Version(specifier.version)
    return pinned


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(d) for d in project["dependencies"]]


def test_every_runtime_dependency_is_pinned_within_pyprojects_range() -> None:
    # A dependency added to pyproject.toml without a pin would install unpinned in the image
    # (pip ignores constraints for what they do not name); a range raised past the pin would
    # fail the image's build at `pip install`, long after the change was made.
    pinned = pins()
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not pinned in {CONSTRAINTS_PATH}"
        assert requirement.specifier.contains(pinned[name]), f"{name} {pinned[name]}: {requirement}"
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for line in build:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned and requirement.specifier.contains(pinned[name]), line


def test_the_pins_cover_what_the_dependencies_pull_in() -> None:
    """Every requirement of a pinned distribution (its extras as pyproject asks for them, the
    markers of Linux and this Python) is pinned too, within that requirement's range. Read
    from the installed distributions' metadata, for those installed at the pinned version (a
    machine with other versions cannot say what the pinned ones require)."""
    pinned = pins()
    extras: dict[str, set[str]] = {}
    for requirement in runtime_requirements():
        extras.setdefault(canonicalize_name(requirement.name), set()).update(requirement.extras)
    checked = 0
    for name, version in pinned.items():
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(distribution.version) != version:
            continue
        checked += 1
        for line in distribution.requires or []:
            requirement = Requirement(line)
            wanted = [{"extra": extra} for extra in ("", *sorted(extras.get(name, ())))]
            if requirement.marker and not any(requirement.marker.evaluate(e) for e in wanted):
                continue
            needed = canonicalize_name(requirement.name)
            assert needed in pinned, f"{name} {version} requires {requirement}: not pinned"
            assert requirement.specifier.contains(pinned[needed], prereleases=True), (
                f"{name} {version} requires {requirement}, pinned {pinned[needed]}"
            )
    assert checked, "no pinned distribution is installed at its pinned version"


def test_the_image_installs_with_the_constraints_file() -> None:
    # The file must reach the build (copied, not ignored) and every pip install must use it.
    assert CONSTRAINTS_PATH in [s for i in context_copies() for s in copy_sources(i)[0]]
    installs = [i for i in read_dockerfile() if i.keyword == "RUN" and "pip install" in i.arguments]
    assert installs and all(f"-c {CONSTRAINTS_PATH}" in i.arguments for i in installs)
