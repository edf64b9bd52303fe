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
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def test_every_stage_is_a_slim_python_image() -> None:
    for stage in stages():
        image = stage[0].arguments.split()[0]
        assert re.fullmatch(r"python:3\.1[1-9]-slim(-[a-z]+)?", image), image


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
    for n, install in installs:
        assert n < source_copy, f"pip install after the source is copied: {install}"
        copied = [
            source
            for i in instructions[:n]
            if i.keyword == "COPY" and i.stage == install.stage and "--from=" not in i.arguments
            for source in copy_sources(i)[0]
        ]
        assert copied == ["pyproject.toml"], f"the dependency layer depends on {copied}"
        # Binary wheels only: nothing is compiled, so no compiler is needed or left behind.
        assert "--only-binary=:all:" in install.arguments
        assert "--no-cache-dir" in install.arguments
    # The final stage takes the installed dependencies before the source, in its own layer.
    final = final_stage()
    deps_copy = next(n for n, i in enumerate(final) if "--from=" in i.arguments)
    own_copy = next(
        n for n, i in enumerate(final) if i.keyword == "COPY" and "proxy" in i.arguments
    )
    assert deps_copy < own_copy


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
    # `python -m proxy` is the `streamfix` command: proxy/__main__.py runs proxy.cli:main.
    assert entrypoint == ["python", "-m", "proxy"]
    assert (ROOT / "proxy" / "__main__.py").exists()
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
