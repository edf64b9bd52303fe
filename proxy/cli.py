"""Command line: `streamfix serve`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from proxy.settings import PROFILE_NAMES, ConfigError, Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamfix",
        description="Reverse proxy that repairs OpenAI-compatible chat streams in flight.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--upstream", help="upstream base URL (env STREAMFIX_UPSTREAM)")
    serve.add_argument("--host", help="address to listen on (env STREAMFIX_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (env STREAMFIX_PORT)")
    serve.add_argument("--config", help="TOML config file (env STREAMFIX_CONFIG)")
    serve.add_argument(
        "--profile",
        choices=PROFILE_NAMES,
        help="upstream provider profile; auto detects it (env STREAMFIX_PROFILE)",
    )
    serve.add_argument("--record", metavar="DIR", help="write one cassette per exchange to DIR")
    serve.add_argument(
        "--replay", metavar="DIR", help="answer from the cassettes in DIR, with no network"
    )
    serve.add_argument(
        "--replay-timing", action="store_true", default=None, help="replay with recorded timing"
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    replay = commands.add_parser(
        "replay", help="check cassettes against today's repairs and the client rules"
    )
    replay.add_argument("directory", help="directory of cassettes")
    replay.add_argument("--update", action="store_true", help="rewrite changed client output")
    replay.add_argument("--config", help="TOML config file (env STREAMFIX_CONFIG)")
    return parser


def _replay(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from proxy.replay_check import check_directory

    try:
        settings = Settings.load(args.config, os.environ)
    except ConfigError as exc:
        print(f"streamfix: invalid configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level="ERROR")
    directory = Path(args.directory)
    results = asyncio.run(check_directory(directory, settings, update=args.update))
    if not results:
        print(f"streamfix replay: no cassettes in {directory}", file=sys.stderr)
        return 2
    for result in results:
        status = "updated" if result.updated else "ok" if result.ok else "CHANGED"
        print(f"{status:<9} {result.name}")
        if result.diff and not result.updated:
            print("\n".join(f"    {line}" for line in result.diff))
        for problem in result.violations:
            print(f"VIOLATION {result.name}: {problem}")
    failed = sum(not result.ok for result in results)
    print(f"{len(results)} cassettes, {failed} with differences or violations")
    return 1 if failed else 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.app import create_app

    try:
        settings = Settings.load(
            args.config,
            os.environ,
            {
                "upstream.base_url": args.upstream,
                "upstream.profile": args.profile,
                "server.host": args.host,
                "server.port": args.port,
                "recording.record_dir": args.record,
                "recording.replay_dir": args.replay,
                "recording.replay_timing": args.replay_timing,
            },
        )
    except ConfigError as exc:
        print(f"streamfix: invalid configuration: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger(__name__).info(
        "streamfix on http://%s:%d/v1 -> %s",
        settings.server.host,
        settings.server.port,
        settings.upstream.base_url,
    )
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level=args.log_level,
        access_log=False,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "replay":
        return _replay(args)
    return 2
