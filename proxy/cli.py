"""Command line: `streamfix serve`, `streamfix replay`, `streamfix explain`, `streamfix config`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from proxy.settings.schema import PROFILE_NAMES, ConfigError, Settings
from proxy.settings.values import parse_keys

# The parent's effective settings, for worker processes (they cannot receive objects).
SETTINGS_ENVIRONMENT = "STREAMFIX_EFFECTIVE_SETTINGS"
LOG_LEVEL_ENVIRONMENT = "STREAMFIX_EFFECTIVE_LOG_LEVEL"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamfix",
        description="Reverse proxy that repairs OpenAI-compatible chat streams in flight.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the proxy")
    _config_flags(serve)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    replay = commands.add_parser(
        "replay", help="check cassettes against today's repairs and the client rules"
    )
    replay.add_argument("directory", help="directory of cassettes")
    replay.add_argument("--update", action="store_true", help="rewrite changed client output")
    replay.add_argument("--config", help="TOML config file (env STREAMFIX_CONFIG)")
    explain = commands.add_parser(
        "explain", help="show a cassette's upstream events beside the client's, with the repairs"
    )
    explain.add_argument("paths", nargs="+", help="cassettes, or directories of cassettes")
    explain.add_argument("--json", action="store_true", help="a JSON document for tools")
    explain.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour: auto is on a terminal unless NO_COLOR is set (FORCE_COLOR forces it)",
    )
    explain.add_argument("--config", help="TOML config file (env STREAMFIX_CONFIG)")
    config = commands.add_parser("config", help="print the effective configuration")
    _config_flags(config)
    return parser


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (env STREAMFIX_CONFIG)")
    parser.add_argument("--upstream", help="upstream base URL (env STREAMFIX_UPSTREAM)")
    parser.add_argument("--host", help="address to listen on (env STREAMFIX_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (env STREAMFIX_PORT)")
    parser.add_argument(
        "--profile", choices=PROFILE_NAMES, help="provider profile (env STREAMFIX_PROFILE)"
    )
    parser.add_argument("--workers", type=int, help="worker processes (env STREAMFIX_WORKERS)")
    parser.add_argument("--log-format", choices=["text", "json"], help="log line format")
    parser.add_argument("--record", metavar="DIR", help="write one cassette per exchange to DIR")
    parser.add_argument("--replay", metavar="DIR", help="answer from the cassettes in DIR")
    parser.add_argument(
        "--replay-timing", action="store_true", default=None, help="replay with recorded timing"
    )


def _settings(args: argparse.Namespace) -> Settings:
    flags = {
        "upstream.base_url": args.upstream,
        "upstream.profile": args.profile,
        "server.host": args.host,
        "server.port": args.port,
        "server.workers": args.workers,
        "server.log_format": args.log_format,
        "recording.record_dir": args.record,
        "recording.replay_dir": args.replay,
        "recording.replay_timing": args.replay_timing,
    }
    settings = Settings.load(args.config, os.environ, flags)
    # Checked here too, in the parent: with several workers a refusal raised only inside each
    # worker would not stop start-up with exit 2.
    parse_keys(os.environ.get("STREAMFIX_API_KEYS"))
    if settings.server.workers > 1 and settings.receipts.store == "memory":
        raise ConfigError(
            "server.workers: the memory receipt store is per process, so a follow-up "
            "landing on another worker would miss its receipts; use a shared store "
            '(receipts.store = "redis://host:6379/0") or one worker'
        )
    return settings


def _serve(args: argparse.Namespace) -> int:
    from proxy.server.app import create_app
    from proxy.server.logs import configure_logging
    from proxy.server.serving import run, uvicorn_config

    settings = _settings(args)
    configure_logging(args.log_level, settings.server.log_format)
    server = settings.server
    if server.workers > 1:
        os.environ[SETTINGS_ENVIRONMENT] = orjson.dumps(settings.to_dict()).decode()
        os.environ[LOG_LEVEL_ENVIRONMENT] = args.log_level
        config = uvicorn_config(
            "proxy.cli:app_from_environment",
            server,
            args.log_level,
            factory=True,
            workers=server.workers,
        )
    else:
        config = uvicorn_config(create_app(settings), server, args.log_level)
    run(config)
    return 0


def app_from_environment() -> object:
    """Worker processes build their app from the settings the parent resolved."""
    from proxy.server.app import create_app
    from proxy.server.logs import configure_logging

    settings = Settings.from_dict(orjson.loads(os.environ[SETTINGS_ENVIRONMENT]))
    configure_logging(os.environ.get(LOG_LEVEL_ENVIRONMENT, "info"), settings.server.log_format)
    return create_app(settings)


def _replay(args: argparse.Namespace) -> int:
    from proxy.replay_check import check_directory
    from proxy.server.logs import configure_logging

    configure_logging("error")  # the report is the output; repairs' notes would bury it
    settings = Settings.load(args.config, os.environ)
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


def _explain(args: argparse.Namespace) -> int:
    from proxy.explain.command import run_explain
    from proxy.server.logs import configure_logging

    configure_logging("error")  # the explanation is the output; repairs' notes would bury it
    settings = Settings.load(args.config, os.environ)
    return run_explain([Path(path) for path in args.paths], settings, args.json, args.color)


def _config(args: argparse.Namespace) -> int:
    from proxy.settings.display import masked

    document = masked(_settings(args), os.environ)
    print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "replay": _replay, "explain": _explain, "config": _config}
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        print(f"streamfix: invalid configuration: {exc}", file=sys.stderr)
        return 2
