"""ensure_redis.py's decisions on made-up machines: nothing here installs anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ensure_redis, redis_server


def on_path(*names: str):
    return lambda name: f"/usr/bin/{name}" if name in names else None


def no_sudo() -> bool:
    raise AssertionError("sudo was asked about although it is not needed")


class Recorder:
    """Stands in for subprocess.run: records each command, answers `status`."""

    def __init__(
        self, status: int = 0, installs: list[str] | None = None, stderr: bytes = b""
    ) -> None:
        self.status = status
        self.stderr = stderr
        self.commands: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.installs = installs  # a made-up PATH that gains redis-server on the install

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        self.commands.append(command)
        self.envs.append(kwargs.get("env") or {})
        if self.installs is not None and command[0] == "apt-get" and "install" in command:
            self.installs.append("redis-server")
        return subprocess.CompletedProcess(command, self.status, stderr=self.stderr)


def test_present_means_nothing_to_do() -> None:
    plan = ensure_redis.plan(on_path("redis-server", "apt-get"), 1000, no_sudo)
    assert plan.action == "present"


def test_root_installs_with_apt_and_keeps_the_service_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plan = ensure_redis.plan(on_path("apt-get", "sudo"), 0, no_sudo)
    assert plan == ensure_redis.Plan("install", ensure_redis.APT)

    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(ensure_redis, "POLICY_RC_D", policy)
    seen_policy: list[str] = []
    path = ["apt-get"]
    recorder = Recorder(installs=path)

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        seen_policy.append(policy.read_text())  # there while apt-get runs
        return recorder(command, **kwargs)

    status = ensure_redis.main(
        [], which=lambda name: name if name in path else None, euid=lambda: 0, run=run
    )
    assert status == 0
    wait = ["-o", f"DPkg::Lock::Timeout={ensure_redis.LOCK_WAIT_SECONDS}"]
    assert recorder.commands == [
        ["apt-get", *wait, "update", "-qq"],
        ["apt-get", *wait, "install", "-y", "-qq", "redis-server"],
    ]
    assert all(env["DEBIAN_FRONTEND"] == "noninteractive" for env in recorder.envs)
    assert seen_policy == [ensure_redis.POLICY_SCRIPT] * 2
    assert not policy.exists()  # removed after the install


def test_root_leaves_an_existing_policy_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(ensure_redis, "POLICY_RC_D", policy)
    path = ["apt-get"]
    status = ensure_redis.main(
        [], which=lambda n: n if n in path else None, euid=lambda: 0, run=Recorder(installs=path)
    )
    assert status == 0
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"


def test_a_failed_install_is_one_line_last(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ensure_redis, "POLICY_RC_D", tmp_path / "policy-rc.d")
    recorder = Recorder(status=100)
    status = ensure_redis.main([], which=on_path("apt-get"), euid=lambda: 0, run=recorder)
    assert status == 100
    assert len(recorder.commands) == 1  # stopped at the first failure (update)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("installing redis-server with apt-get failed (exit 100)")
    assert not (tmp_path / "policy-rc.d").exists()


def test_a_lock_held_past_the_wait_is_named_in_the_last_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """apt-get waits for the lock (its own DPkg::Lock::Timeout); when another apt process
    still holds it after that, the last line says so instead of a bare "exit 100"."""
    monkeypatch.setattr(ensure_redis, "POLICY_RC_D", tmp_path / "policy-rc.d")
    apt_says = (
        b"E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)\n"
    )
    recorder = Recorder(status=100, stderr=apt_says)
    status = ensure_redis.main([], which=on_path("apt-get"), euid=lambda: 0, run=recorder)
    assert status == ensure_redis.LOCK_HELD_EXIT
    err = capsys.readouterr().err
    assert "It is held by process 4242" in err  # apt's own words, passed on
    last = err.strip().splitlines()[-1]
    assert last.startswith("installing redis-server with apt-get failed: another process held")
    assert f"more than {ensure_redis.LOCK_WAIT_SECONDS} s" in last


def test_a_lock_held_under_sudo_reaches_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The root run under sudo exits LOCK_HELD_EXIT; the run that started it names the lock."""
    recorder = Recorder(status=ensure_redis.LOCK_HELD_EXIT)
    status = ensure_redis.main(
        [],
        which=on_path("apt-get", "sudo"),
        euid=lambda: 1000,
        passwordless_sudo=lambda: True,
        run=recorder,
    )
    assert status == ensure_redis.LOCK_HELD_EXIT
    assert "held the package manager's lock" in capsys.readouterr().err.strip().splitlines()[-1]


def test_not_root_without_sudo_prints_one_line_and_installs_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorder = Recorder()
    status = ensure_redis.main(
        [], which=on_path("apt-get"), euid=lambda: 1000, passwordless_sudo=no_sudo, run=recorder
    )
    assert status == 1
    assert recorder.commands == []
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        "redis-server is not on the PATH, and installing it needs root: run "
        "`sudo apt-get update -qq && sudo apt-get install -y -qq redis-server`, "
        "then run the tests again\n"
    )


def test_not_root_when_sudo_asks_for_a_password_prints_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorder = Recorder()
    status = ensure_redis.main(
        [],
        which=on_path("dnf", "sudo"),
        euid=lambda: 1000,
        passwordless_sudo=lambda: False,
        run=recorder,
    )
    assert status == 1
    assert recorder.commands == []
    [line] = capsys.readouterr().err.splitlines()
    assert "`sudo dnf install -y /usr/bin/redis-server`" in line


def test_not_root_with_passwordless_sudo_runs_itself_as_root() -> None:
    plan = ensure_redis.plan(on_path("apt-get", "sudo"), 1000, lambda: True)
    assert plan == ensure_redis.Plan("sudo", ensure_redis.APT)

    path = ["apt-get", "sudo"]

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        path.append("redis-server")
        return recorder(command, **kwargs)

    recorder = Recorder()
    status = ensure_redis.main(
        [],
        which=lambda n: n if n in path else None,
        euid=lambda: 1000,
        passwordless_sudo=lambda: True,
        run=run,
    )
    assert status == 0
    assert recorder.commands == [
        ["sudo", "-n", sys.executable, str(Path(ensure_redis.__file__).resolve())]
    ]


def test_homebrew_needs_no_root() -> None:
    plan = ensure_redis.plan(on_path("brew"), 501, no_sudo)
    assert plan == ensure_redis.Plan("install", ensure_redis.BREW)
    assert ensure_redis.BREW.advice() == "brew install redis"


def test_apk_as_root() -> None:
    plan = ensure_redis.plan(on_path("apk"), 0, no_sudo)
    assert plan.action == "install"
    assert plan.manager is not None
    assert plan.manager.commands == (("apk", "add", "--no-cache", "redis"),)


def test_no_package_manager_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status = ensure_redis.main([], which=on_path(), euid=lambda: 0, run=Recorder())
    assert status == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("redis-server is not on the PATH and no known package manager is")


def test_dry_run_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder()
    status = ensure_redis.main(
        ["--dry-run"], which=on_path("apt-get"), euid=lambda: 0, run=recorder
    )
    assert status == 0
    assert recorder.commands == []
    assert "would run: apt-get update -qq && apt-get install -y -qq redis-server" in (
        capsys.readouterr().err
    )


def test_the_redis_fixture_fails_with_the_scripts_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No redis-server and no way to install it: the fixture fails (never skips) with the line."""
    line = "redis-server is not on the PATH, and installing it needs root: run `x`"
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)

    def script(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert command == [sys.executable, str(redis_server.ENSURE_SCRIPT)]
        return subprocess.CompletedProcess(command, 1, "", f"{line}\n")

    monkeypatch.setattr(redis_server.subprocess, "run", script)
    redis_server._ensured.cache_clear()
    with pytest.raises(pytest.fail.Exception) as failed:
        next(redis_server.started_redis_server())
    assert str(failed.value) == line
    redis_server._ensured.cache_clear()
