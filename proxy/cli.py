"""Command line: `streamfix serve`, `replay`, `explain`, `config` and `doctor`."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from proxy import __version__
from proxy.settings.schema import ENVIRONMENT_KEYS, FLAGS, LOG_LEVELS, PROFILE_NAMES, Settings
from proxy.settings.values import ConfigError, flatten, parse_keys
from proxy.wire import json_codec

# The parent's effective settings, for worker processes (they cannot receive objects).
SETTINGS_ENVIRONMENT = "STREAMFIX_EFFECTIVE_SETTINGS"

# Flags that set a config key: (dotted key, argparse options, help), each flag's name from the
# settings' FLAGS (where the README's configuration table reads it too). Their help shows the
# built-in default, the environment variable and the config key, read from the settings
# themselves so the help cannot drift from them. Their argparse default is None: "not given",
# so the file and the environment below them still apply.
SETTINGS_FLAGS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("upstream.base_url", {"metavar": "URL"}, "upstream base URL"),
    ("server.host", {}, "address to listen on"),
    ("server.port", {"type": int}, "port to listen on"),
    ("upstream.profile", {"choices": PROFILE_NAMES}, "provider profile"),
    ("server.workers", {"type": int, "metavar": "N"}, "worker processes"),
    (
        "server.log_level",
        {"choices": LOG_LEVELS},
        "least severe records logged; debug adds each repair and upstream request line",
    ),
    ("server.log_format", {"choices": ["text", "json"]}, "log line format"),
    ("recording.record_dir", {"metavar": "DIR"}, "write one cassette per exchange"),
    ("recording.replay_dir", {"metavar": "DIR"}, "answer from the cassettes in DIR"),
    (
        "recording.replay_timing",
        {"action": "store_true"},
        "replay with recorded timing",
    ),
)
CONFIG_HELP = "TOML config file (env STREAMFIX_CONFIG; default: none, built-in defaults)"

# Each command's exit statuses, shown at the end of its help page (and `main`'s docstring).
USAGE_EXIT = "2 a usage or configuration error (one line on stderr)"
EXIT_CODES = {
    "streamfix": (
        "exit status: 0 done; 1 `replay` found differences, `doctor` found something the "
        f"proxy does not fix; {USAGE_EXIT}; 130 interrupted (Ctrl-C)"
    ),
    "serve": f"exit status: 0 stopped (Ctrl-C or SIGTERM, open streams finished); {USAGE_EXIT}",
    "replay": (
        "exit status: 0 every cassette as recorded; 1 a cassette changed, broke a client "
        f"rule or cannot be replayed; {USAGE_EXIT}, or no cassettes in the directory"
    ),
    "explain": f"exit status: 0 explained; {USAGE_EXIT}, or a path that is not a cassette",
    "config": f"exit status: 0 printed; {USAGE_EXIT}",
    "doctor": (
        "exit status: 0 nothing left unfixed; 1 some check not_fixable; 2 a usage error, "
        "nothing confirmed (nothing sent), or the upstream could not be reached"
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors on one line: what is wrong, and where to read more."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            2,
            f"{self.prog}: error: {message}{_flag_hint(self, message)} (see {self.prog} --help)\n",
        )


def _flag_hint(parser: argparse.ArgumentParser, message: str) -> str:
    """ "; did you mean --port?" for an unrecognised flag close to one of the command's."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    known = [flag for action in parser._actions for flag in action.option_strings]
    for word in message.split(":", 1)[1].split():
        close = (
            difflib.get_close_matches(word.split("=")[0], known, n=1) if word[:2] == "--" else []
        )
        if close:
            return f"; did you mean {close[0]}?"
    return ""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, except where there is none to show (None: not
    given; False: a switch that is off; "": nothing) or the help says it already. Lines wrap
    between words only: a URL is never cut in two (textwrap would break a word longer than
    the column, and at hyphens)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        empty = action.default in (None, False, "", argparse.SUPPRESS)
        if empty or "default:" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def _parser() -> argparse.ArgumentParser:
    options: dict[str, Any] = {"formatter_class": _HelpFormatter}
    parser = _Parser(
        prog="streamfix",
        description="Reverse proxy that repairs OpenAI-compatible chat streams in flight.",
        epilog=EXIT_CODES["streamfix"],
        **options,
    )
    parser.add_argument("--version", action="version", version=f"streamfix {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    serve = commands.add_parser(
        "serve", help="run the proxy", epilog=EXIT_CODES["serve"], **options
    )
    _config_flags(serve)
    replay = commands.add_parser(
        "replay",
        help="check cassettes against today's repairs and the client rules",
        epilog=EXIT_CODES["replay"],
        **options,
    )
    replay.add_argument("directory", help="directory of cassettes")
    replay.add_argument("--update", action="store_true", help="rewrite changed client output")
    replay.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    explain = commands.add_parser(
        "explain",
        help="show a cassette's upstream events beside the client's, with the repairs",
        epilog=EXIT_CODES["explain"],
        **options,
    )
    explain.add_argument("paths", nargs="+", help="cassettes, or directories of cassettes")
    explain.add_argument("--json", action="store_true", help="a JSON document for tools")
    explain.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour: auto is on a terminal unless NO_COLOR is set (FORCE_COLOR forces it)",
    )
    explain.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    config = commands.add_parser(
        "config",
        help="print the effective configuration as TOML, secrets masked",
        description="Print the effective configuration (defaults, the config file, STREAMFIX_* "
        "variables and these flags) as TOML to paste into a config file, secrets masked.",
        epilog=EXIT_CODES["config"],
        **options,
    )
    _config_flags(config)
    config.add_argument("--json", action="store_true", help="print JSON instead, for tools")
    _doctor_parser(commands, options)
    return parser


def _doctor_parser(commands: Any, options: dict[str, Any]) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="probe an upstream, name its quirks, show what the proxy does, suggest a config",
        description="Send a small battery of requests (after confirmation) to one upstream, "
        "examine each answer as sent and as the proxy in process delivers it, and print a "
        "verdict per check and the configuration to paste. --from DIR reads cassettes instead.",
        epilog=EXIT_CODES["doctor"],
        **options,
    )
    doctor.add_argument("--upstream", metavar="URL", default="", help="upstream base URL")
    doctor.add_argument("--model", metavar="NAME", default="", help="model to ask")
    doctor.add_argument(
        "--api-key-env", metavar="VAR", default="", help="variable holding the upstream's key"
    )
    doctor.add_argument("--json", action="store_true", help="a JSON document for tools")
    doctor.add_argument("--yes", action="store_true", help="send without asking")
    doctor.add_argument("--route", metavar="NAME", default="", help="suggest a [[routes]] entry")
    doctor.add_argument(
        "--from",
        dest="from_dir",
        metavar="DIR",
        default="",
        help="read the cassettes in DIR instead of sending anything (no network)",
    )
    doctor.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="for each request; the whole run stops after 8 times this",
    )


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    defaults = flatten(Settings().to_dict())
    variables = {key: name for name, key in ENVIRONMENT_KEYS.items()}
    for key, options, text in SETTINGS_FLAGS:
        flag = FLAGS[key]
        default = defaults[key]
        shown = json_codec.dumps(default).decode() if isinstance(default, str | bool) else default
        where = [f"default: {shown if default != '' else 'none'}"]
        if key in variables:
            where.append(f"env {variables[key]}")
        where.append(f"config {key}")
        if "choices" not in options and "action" not in options:
            options = {"metavar": flag.lstrip("-").upper(), **options}  # not "SERVER.PORT"
        parser.add_argument(
            flag, dest=key, default=None, help=f"{text} ({'; '.join(where)})", **options
        )


def _settings(args: argparse.Namespace) -> Settings:
    flags = {key: getattr(args, key) for key, _, _ in SETTINGS_FLAGS}
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
    server = settings.server
    configure_logging(server.log_level, server.log_format)
    if server.workers > 1:
        os.environ[SETTINGS_ENVIRONMENT] = json_codec.dumps(settings.to_dict()).decode()
        config = uvicorn_config(
            "proxy.cli:app_from_environment",
            server,
            server.log_level,
            factory=True,
            workers=server.workers,
        )
    else:
        config = uvicorn_config(create_app(settings), server, server.log_level)
    run(config)
    return 0


def app_from_environment() -> object:
    """Worker processes build their app from the settings the parent resolved."""
    from proxy.server.app import create_app
    from proxy.server.logs import configure_logging

    settings = Settings.from_dict(json_codec.loads(os.environ[SETTINGS_ENVIRONMENT]))
    configure_logging(settings.server.log_level, settings.server.log_format)
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
        if result.unreplayable:
            status = "STALE"
        print(f"{status:<9} {result.name}")
        if result.unreplayable:
            print(f"    {result.unreplayable}")
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
    from proxy.routing.rules_view import learned, rules_in_force
    from proxy.settings.display import as_toml, masked

    settings = _settings(args)
    document = masked(settings, os.environ)
    shown = [document["upstream"], *document["routes"]]
    for upstream, table in zip([settings.upstream, *settings.routes], shown, strict=True):
        table["rules_in_force"] = rules_in_force(upstream)
        table["learned"] = learned(settings.receipts, upstream, os.environ)
    if args.json:
        print(json_codec.dumps_indented(document).decode())
    else:
        print(as_toml(document), end="")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from proxy.doctor.command import Options, run_doctor
    from proxy.server.logs import configure_logging

    configure_logging("error")  # the report is the output; repairs' notes would bury it
    return run_doctor(
        Options(
            args.upstream,
            args.model,
            args.api_key_env,
            args.json,
            args.yes,
            args.route,
            args.from_dir,
            args.timeout,
        )
    )


COMMANDS = {
    "serve": _serve,
    "replay": _replay,
    "explain": _explain,
    "config": _config,
    "doctor": _doctor,
}


def _command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done; 1 replay found differences, doctor something it does not fix; 2 a
    usage or configuration error (one line on stderr, never a traceback); 130 interrupted.
    Each help page says its own (`EXIT_CODES`)."""
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, so the hint names its help page
        command_parser = _command_parsers(parser).get(args.command, parser)
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:  # bare `streamfix`: what it can do, as uvicorn and git show
        parser.print_help()
        return 0
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # so a closed pipe shows up here, not in the flush at exit
        return code
    except ConfigError as exc:
        print(f"streamfix: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `streamfix config | head -1`: the reader has what it wanted. Python's recipe (the
        # signal module's "Note on SIGPIPE"): point stdout at devnull so the interpreter's own
        # flush at exit does not fail again with the same error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
