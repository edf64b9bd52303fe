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
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


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
    return 2
