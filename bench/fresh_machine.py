"""A fresh machine, as near as one machine gets: the README's commands as written, in a copy of
the repository, a new virtual environment, an empty HOME and a PATH without node or npm.

    python bench/fresh_machine.py            # the test command (about 8 minutes)
    python bench/fresh_machine.py --serve    # clone to the first repaired response, timed

The test command must pass with Python alone: Node comes from the test extra, redis-server
from tests/support/ensure_redis.py when it is missing. `--serve` runs the first command with
`--replay recordings/` (no network, no key) and times until a recorded Gemini tool call comes
back repaired. Every wait is bounded; the copy is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = {"node", "nodejs", "npm", "npx", "corepack"}
TEST_TIMEOUT = 1800.0
SERVE_TIMEOUT = 600.0
PORT = 8093


def readme_commands() -> tuple[str, str]:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return blocks[0].strip(), blocks[1].strip()


def stripped_path(scratch: Path) -> str:
    """The PATH's directories, with node, npm and their kin hidden behind a directory of links
    to everything else in /usr/bin and /bin."""
    shadow = scratch / "bin"
    shadow.mkdir()
    for directory in ("/usr/bin", "/bin"):
        for entry in Path(directory).iterdir():
            target = shadow / entry.name
            if entry.name not in HIDDEN and not target.exists():
                target.symlink_to(entry)
    kept = [d for d in os.environ["PATH"].split(os.pathsep) if d not in ("/usr/bin", "/bin")]
    kept = [d for d in kept if not any((Path(d) / name).exists() for name in HIDDEN)]
    return os.pathsep.join([*kept, str(shadow)])


def fresh_copy(scratch: Path) -> Path:
    copy = scratch / "streamfix"
    copy.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive.stdout, check=True)
    return copy


def environment(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMFIX_", "VIRTUAL_"))}
    env.update(PATH=stripped_path(scratch), HOME=str(scratch / "home"))
    (scratch / "home").mkdir()
    return env


def run_tests(copy: Path, env: dict[str, str]) -> int:
    _, tests = readme_commands()
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", tests], cwd=copy, env=env, timeout=TEST_TIMEOUT)
    print(f"test command: exit {result.returncode} after {time.monotonic() - started:.0f} s")
    return result.returncode


def first_repaired_response(copy: Path, env: dict[str, str], started: float) -> int:
    serve, _ = readme_commands()
    command = f"{serve} --replay recordings/ --port {PORT}"
    process = subprocess.Popen(["bash", "-c", command], cwd=copy, env=env, start_new_session=True)
    cassette = json.loads((copy / "recordings/gemini_indexless_call_stop.json").read_text())
    try:
        deadline = time.monotonic() + SERVE_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{PORT}/v1/chat/completions",
                    json=cassette["request"]["body"],
                    headers={"x-streamfix-debug": "1"},
                    timeout=10,
                )
            except httpx.TransportError:
                time.sleep(0.5)
                continue
            repaired = b"tool_call_index_added" in response.content
            print(f"first response {response.status_code} after {time.monotonic() - started:.1f} s")
            print(f"x-streamfix-repairs: {response.headers.get('x-streamfix-repairs')}")
            print(response.content.decode()[-200:])
            return 0 if repaired else 1
        print("no response before the deadline", file=sys.stderr)
        return 1
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", action="store_true", help="time clone to first response")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="streamfix-fresh-"))
    try:
        started = time.monotonic()
        copy = fresh_copy(scratch)
        env = environment(scratch)
        hidden = subprocess.run(["bash", "-c", "command -v node npm"], env=env, capture_output=True)
        print(f"node/npm on the PATH: {hidden.stdout.decode().split() or 'none'}")
        if args.serve:
            return first_repaired_response(copy, env, started)
        return run_tests(copy, env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
