"""The targets' processes: streamfix (`python -m proxy serve`), the raw TCP relay, LiteLLM;
starting them and waiting until they answer (Portkey's gateway: perf/portkey.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf_procs import HOST, serve_command, start

from .config import BENCH, RELAY, RESULTS, ROOT, Failed, progress


@dataclass
class Target:
    name: str
    port: int
    process: subprocess.Popen | None = None
    """The server (None for direct: the client talks to the fake)."""
    health: str = "/healthz"
    note: str = ""
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    """Request headers of its own on every request (a peer that routes by header)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


def clean_env() -> dict[str, str]:
    """The environment without the caller's STREAMFIX_* and LiteLLM settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("STREAMFIX_", "LITELLM_"))}


def toml(sections: dict[str, dict[str, Any]]) -> str:
    """Flat TOML tables; JSON spells booleans, numbers and plain strings as TOML does."""
    return "\n".join(
        f"[{section}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
        for section, keys in sections.items()
    )


def start_streamfix(
    name: str, port: int, upstream: str, config: dict[str, dict[str, Any]], work: Path
) -> Target:
    """`python -m proxy serve` with `config` in its own file `<name>.toml` (none when empty)."""
    path = None
    if config:
        path = work / f"{name}.toml"
        path.write_text(toml(config))
    command = serve_command(upstream, port, path)
    process = start(command, RESULTS / "logs" / f"{name}.log", env=clean_env(), cwd=ROOT)
    return Target(name, port, process, "/healthz", " ".join(command[1:]))


def start_relay(port: int, upstream_port: int) -> Target:
    """bench/perf_relay.py on 127.0.0.1:`port`, relaying to the fake on `upstream_port`."""
    command = [
        sys.executable,
        str(BENCH / "perf_relay.py"),
        "--port",
        str(port),
        "--upstream-port",
        str(upstream_port),
    ]
    process = start(command, RESULTS / "logs" / f"{RELAY}.log", env=clean_env(), cwd=ROOT)
    note = " ".join(["python", str(Path(command[1]).relative_to(ROOT)), *command[2:]])
    return Target(RELAY, port, process, "/health", note)  # /health goes through to the fake


def ensure_litellm(venv: Path, spec: str) -> Path:
    """The `litellm` executable in `venv`, installed there first when missing."""
    executable = venv / "bin" / "litellm"
    if executable.exists():
        return executable
    progress(f"installing {spec} into {venv} (once; about a minute)")
    log = RESULTS / "logs" / "litellm-install.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "--quiet", spec],
        ]
        for step in steps:
            try:
                code = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=600)
            except subprocess.TimeoutExpired as exc:
                raise Failed(f"`{' '.join(step)}` took over 600 s") from exc
            if code.returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-2:]
                said = " | ".join(line[:240] for line in tail)
                raise Failed(f"`{' '.join(step)}` exited {code.returncode}: {said} (see {log})")
    if not executable.exists():
        raise Failed(f"{spec} installed no `litellm` executable")
    return executable


LITELLM_ENV = {
    # No master key: requests are not authenticated (the other targets do no auth either).
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    "LITELLM_LOG": "ERROR",  # no per-request log lines (the proxies log at warning)
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the cost map at start-up
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "true",
    "DISABLE_ADMIN_UI": "True",
}


def litellm_config(upstream: str) -> dict[str, Any]:
    """A passthrough: every model name goes to the fake as an OpenAI-compatible model. No
    database, no callbacks, no spend or error logs, no cost map fetch."""
    return {
        "model_list": [
            {
                "model_name": "*",
                "litellm_params": {"model": "openai/*", "api_base": upstream, "api_key": "x"},
            }
        ],
        "litellm_settings": {
            "set_verbose": False,
            "json_logs": False,
            "turn_off_message_logging": True,
            "request_timeout": 600,
        },
        "general_settings": {"disable_spend_logs": True, "disable_error_logs": True},
    }


UVICORN_QUIET = {  # uvicorn's access log off, as for the streamfix targets
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {
        "err": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        name: {"handlers": ["err"], "level": "WARNING", "propagate": False}
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
    },
}


def start_litellm(port: int, upstream: str, work: Path, venv: Path, spec: str) -> Target:
    target = Target("litellm", port, health="/health/readiness")
    try:
        executable = ensure_litellm(venv, spec)
    except Failed as exc:
        target.error = f"not installed: {exc}"
        return target
    config = work / "litellm.yaml"  # JSON is YAML
    config.write_text(json.dumps(litellm_config(upstream), indent=1))
    log_config = work / "litellm-logging.json"
    log_config.write_text(json.dumps(UVICORN_QUIET))
    command = [
        str(executable),
        "--config",
        str(config),
        "--host",
        HOST,
        "--port",
        str(port),
        "--num_workers",
        "1",
        "--log_config",
        str(log_config),
    ]
    env = {**clean_env(), **LITELLM_ENV}
    target.process = start(command, RESULTS / "logs" / "litellm.log", env=env, cwd=work)
    target.note = " ".join(["litellm", *command[1:]])
    return target


def litellm_version(venv: Path) -> str:
    python = venv / "bin" / "python"
    try:
        return subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def wait_ready(target: Target, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = f"http://{HOST}:{target.port}{target.health}"
    while time.monotonic() < deadline:
        if target.process is not None and target.process.poll() is not None:
            raise Failed(f"exited with status {target.process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise Failed(f"not ready after {timeout:.0f} s ({url})")


def fake_stats(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{HOST}:{port}/stats", timeout=5) as answer:
        return json.loads(answer.read())
