"""Make sure `redis-server` is on the PATH, installing it when this machine lets us.

The Redis receipt-store tests start their own `redis-server` processes on loopback ports
(tests/support/redis_server.py), and no Python package ships the binary. So when it is
missing, the Redis fixture runs this script (`python3 tests/support/ensure_redis.py`; it needs
the standard library only, and `--dry-run` prints what it would run instead):

- as root, it installs the package with the system's package manager: apt-get (Debian's
  `redis-server`, with a policy-rc.d that keeps the package's own service from starting during
  the install: nothing runs under systemd here, and a service that fails to start fails the
  install), dnf (whatever provides /usr/bin/redis-server) or apk (`redis`);
- not root, with passwordless sudo, it runs itself again under `sudo -n`;
- not root, with Homebrew and no system package manager (macOS), `brew install redis`;
- otherwise it prints ONE line saying exactly what to install, and exits 1.

Exit 0 means `redis-server` is on the PATH now. `plan()` decides without touching anything,
so tests/support/test_ensure_redis.py checks each case with a made-up machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BINARY = "redis-server"
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# `exit 101` is "action forbidden" to invoke-rc.d: the package installs, its service stays down.
POLICY_SCRIPT = "#!/bin/sh\nexit 101\n"
PREFIX = "ensure_redis:"
LOCK_WAIT_SECONDS = 300
"""How long apt-get waits for the dpkg/apt lock held by another process (an unattended
upgrade on a fresh machine, a second `apt-get` in a CI step) before it gives up (exit 100)."""
LOCK_HELD = "Could not get lock"
"""apt's own words when the wait ran out: `E: Could not get lock /var/lib/dpkg/lock-frontend.
It is held by process 1234 (apt-get)`."""
LOCK_HELD_EXIT = 75
"""EX_TEMPFAIL: the exit status for "the lock was held", so that a run under sudo tells the
run that started it (which writes the last line) why it failed."""


@dataclass(frozen=True)
class Manager:
    """One package manager: the commands that install the package, and what to tell a user."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    needs_root: bool = True
    env: dict[str, str] = field(default_factory=dict)
    block_services: bool = False  # apt: the policy-rc.d around the install
    lock_options: tuple[str, ...] = ()
    """Put after the command's name when run here (not in the advice a user reads)."""

    def advice(self, *, as_user: bool = True) -> str:
        """The commands as one shell line; with `sudo` when a user would need it."""
        sudo = "sudo " if as_user and self.needs_root else ""
        return " && ".join(sudo + " ".join(command) for command in self.commands)


APT = Manager(
    "apt-get",
    (("apt-get", "update", "-qq"), ("apt-get", "install", "-y", "-qq", "redis-server")),
    env={"DEBIAN_FRONTEND": "noninteractive"},
    block_services=True,
    lock_options=("-o", f"DPkg::Lock::Timeout={LOCK_WAIT_SECONDS}"),
)
DNF = Manager("dnf", (("dnf", "install", "-y", "/usr/bin/redis-server"),))
APK = Manager("apk", (("apk", "add", "--no-cache", "redis"),))
BREW = Manager("brew", (("brew", "install", "redis"),), needs_root=False)
# The first one on the PATH wins; brew last, so a Linux box with Linuxbrew still uses its own.
MANAGERS = (APT, DNF, APK, BREW)


@dataclass(frozen=True)
class Plan:
    """What main() does: nothing, install with `manager` (maybe via sudo), or print `message`."""

    action: str  # "present" | "install" | "sudo" | "refuse"
    manager: Manager | None = None
    message: str = ""


def plan(
    which: Callable[[str], str | None],
    euid: int,
    passwordless_sudo: Callable[[], bool],
) -> Plan:
    """Decide from what is on the PATH (`which`), who we are and whether sudo asks nothing."""
    if which(BINARY):
        return Plan("present")
    manager = next((m for m in MANAGERS if which(m.name)), None)
    if manager is None:
        return Plan(
            "refuse",
            message=(
                f"{BINARY} is not on the PATH and no known package manager is (apt-get, dnf, "
                "apk, brew): install Redis so that `redis-server` is on the PATH, then run the "
                "tests again"
            ),
        )
    if not manager.needs_root or euid == 0:
        return Plan("install", manager)
    if which("sudo") and passwordless_sudo():
        return Plan("sudo", manager)
    return Plan(
        "refuse",
        manager,
        message=(
            f"{BINARY} is not on the PATH, and installing it needs root: run "
            f"`{manager.advice()}`, then run the tests again"
        ),
    )


def _passwordless_sudo() -> bool:
    try:
        done = subprocess.run(
            ["sudo", "-n", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1  # -1: not root (Windows)


def _say(line: str) -> None:
    print(f"{PREFIX} {line}", file=sys.stderr, flush=True)


def install(manager: Manager, run: Callable[..., subprocess.CompletedProcess[bytes]]) -> int:
    """Run `manager`'s commands (as we are), with the policy-rc.d and the lock wait for apt; the
    first failure's exit status, or 0. Each command's error output is read (and written on to
    stderr as it came) so that a lock held past the wait is named in the failure line."""
    env = {**os.environ, **manager.env}
    own_policy = False
    if manager.block_services and not POLICY_RC_D.exists():
        POLICY_RC_D.write_text(POLICY_SCRIPT)
        POLICY_RC_D.chmod(0o755)
        own_policy = True
    try:
        for command in manager.commands:
            argv = [command[0], *manager.lock_options, *command[1:]]
            done = run(argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
            errors = (done.stderr or b"").decode("utf-8", "replace")
            sys.stderr.write(errors)
            if done.returncode != 0:
                _say(f"`{' '.join(argv)}` failed (exit {done.returncode})")
                return LOCK_HELD_EXIT if LOCK_HELD in errors else done.returncode
        return 0
    finally:
        if own_policy:
            POLICY_RC_D.unlink(missing_ok=True)


def _locked(body: Callable[[], int]) -> int:
    """`body` under an exclusive lock, so parallel test workers do not install over each other."""
    try:
        import fcntl
    except ImportError:  # Windows: no package manager here anyway
        return body()
    lock_path = Path(tempfile.gettempdir()) / "streamfix-ensure-redis.lock"
    try:
        lock = open(lock_path, "a")  # noqa: SIM115 (closed below; a failed open is no lock)
    except OSError:  # another user's lock file: go on without one
        return body()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return body()


def main(
    argv: Sequence[str] | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    euid: Callable[[], int] = _euid,
    passwordless_sudo: Callable[[], bool] = _passwordless_sudo,
    run: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run,
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be run, change nothing"
    )
    args = parser.parse_args(argv)

    decided = plan(which, euid(), passwordless_sudo)
    if decided.action == "refuse":
        print(decided.message, file=sys.stderr, flush=True)
        return 1
    if decided.action == "present":
        return 0

    manager = decided.manager
    assert manager is not None
    if decided.action == "sudo":
        # The root run takes the lock itself (taking it here too would deadlock on it).
        command = ["sudo", "-n", sys.executable, str(Path(__file__).resolve())]
        if args.dry_run:
            command.append("--dry-run")
        _say(f"{BINARY} is missing; installing it as root: {' '.join(command)}")
        status = run(command, stdin=subprocess.DEVNULL).returncode
    elif args.dry_run:
        _say(f"{BINARY} is missing; would run: {manager.advice(as_user=False)}")
        return 0
    else:

        def attempt() -> int:
            if which(BINARY):  # another worker installed it while we waited for the lock
                return 0
            _say(f"{BINARY} is missing; installing it with {manager.name}")
            return install(manager, run)

        status = _locked(attempt)
    if status == LOCK_HELD_EXIT:
        print(
            f"installing {BINARY} with {manager.name} failed: another process held the package "
            f"manager's lock for more than {LOCK_WAIT_SECONDS} s ({manager.name} waited for it): "
            f"run the tests again once it is done, or run `{manager.advice()}` by hand",
            file=sys.stderr,
            flush=True,
        )
        return status
    if status != 0:
        print(
            f"installing {BINARY} with {manager.name} failed (exit {status}): run "
            f"`{manager.advice()}` by hand, then run the tests again",
            file=sys.stderr,
            flush=True,
        )
        return status
    if not args.dry_run and not which(BINARY):
        print(
            f"{manager.name} installed Redis but `{BINARY}` is still not on the PATH: add its "
            "directory to the PATH, then run the tests again",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
