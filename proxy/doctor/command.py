"""`streamfix doctor`: the battery sent (after a confirmation) or cassettes read, each answer
examined as the upstream sent it and as the proxy delivers it, then the report."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from proxy.doctor import native_responses, recorded
from proxy.doctor.checks import CHECKS, Check, Context
from proxy.doctor.examine import Answer, problems, read_answer
from proxy.doctor.native_responses import NativeResponses
from proxy.doctor.probe import (
    DOCTOR_TENANT,
    AnsweringTransport,
    Limits,
    Unreachable,
    in_process_proxy,
    send,
    through_proxy,
    upstream_body,
    upstream_text,
)
from proxy.doctor.report import HELPFUL_KEYS, Row, as_json, as_text, parse_repairs, suggested
from proxy.replay_check import replayed, settings_for
from proxy.settings.schema import Settings
from proxy.settings.toml_text import value_text
from proxy.upstream.cassettes import Cassette
from proxy.wire import json_codec
from proxy.wire.credentials import MASK, masked_url

COMMENT = b": streamfix-repairs "


class Refused(Exception):
    """A usage problem, one line for stderr."""


@dataclass
class Options:
    upstream: str
    model: str
    api_key_env: str = ""
    json: bool = False
    yes: bool = False
    route: str = ""
    from_dir: str = ""
    timeout: float = 30.0


def run_doctor(options: Options) -> int:
    """0: the report printed, every problem fixed; 1: some problem the proxy does not fix;
    2: a usage problem, nothing confirmed (the plan printed, nothing sent), or an upstream
    that cannot be reached (the run stops at the first connection failure)."""
    key = ""
    try:
        if options.from_dir:
            return _from_recordings(Path(options.from_dir), options.json)
        if not options.upstream or not options.model:
            raise Refused("--upstream and --model are needed (or --from DIR)")
        key = _key(options.api_key_env)
        if not _confirmed(options):
            return 2
        rows, native = asyncio.run(_live(options, key))
        upstream, model = options.upstream, options.model
    except Refused as exc:
        print(f"streamfix doctor: {exc}", file=sys.stderr)
        return 2
    upstream = masked_url(upstream)  # a password in the URL is a credential too
    config = suggested(upstream, model, rows, options.api_key_env, options.route)
    if options.json:
        document = as_json(upstream, model, rows, config)
        document["native_responses"] = native.as_json()
        text = json_codec.dumps_indented(document).decode() + "\n"
    else:
        text = as_text(upstream, model, rows, config, _colour(), [native.note])
    # An upstream's error may quote the key it was sent; the report never does.
    print(text.replace(key, MASK) if key else text, end="")
    return 1 if any(row.verdict == "not_fixable" for row in rows) else 0


def _colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _key(variable: str) -> str:
    if not variable:
        return ""
    key = os.environ.get(variable, "")
    if not key:
        raise Refused(f"--api-key-env {variable}: that variable is not set")
    return key


def _confirmed(options: Options) -> bool:
    """--yes, or "y" typed at a terminal; otherwise the plan is printed and nothing is sent."""
    count = len(CHECKS)
    where = f"{masked_url(options.upstream.rstrip('/'))}/chat/completions"
    plan = [f"streamfix doctor would send {count} requests to {where}"]
    plan.append(f"(model {options.model}, max_tokens 64 at most each, plus one more per request")
    plan.append("a repair changes), and nowhere else:")
    plan += [f"  {n}. {check.name}: {check.asks}" for n, check in enumerate(CHECKS, 1)]
    responses = f"{masked_url(options.upstream.rstrip('/'))}/responses"
    plan.append(f"plus one request to {responses} whose `input` is a number: a native")
    plan.append("Responses API refuses it without generating, which tells whether there is one.")
    print("\n".join(plan), file=sys.stderr)
    if options.yes:
        return True
    if sys.stdin.isatty():
        answer = input(f"Send these {count} requests? [y/N] ").strip().lower()
        if answer == "y":
            return True
    print("streamfix doctor: nothing sent (pass --yes to send)", file=sys.stderr)
    return False


def _settings(options: Options) -> Settings:
    return Settings().with_values(
        {
            "upstream.base_url": options.upstream,
            "upstream.connect_timeout": options.timeout,
            "upstream.read_timeout": options.timeout,
            "routes": [],
        },
        text=False,
    )


TIME_LIMIT_FACTOR = 8
"""The whole run may take this many times the per-request timeout."""


async def _live(options: Options, key: str) -> tuple[list[Row], NativeResponses]:
    base_url = options.upstream.rstrip("/")
    url = f"{base_url}/chat/completions"
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    # Each check once direct, once more when a repair changed it, and once per suggested key.
    budget = 2 * len(CHECKS) + len(HELPFUL_KEYS) + 1  # and the native /responses probe
    limits = Limits(options.timeout, options.timeout * TIME_LIMIT_FACTOR, budget)
    context = Context(options.model)
    transport = AnsweringTransport(base_url, limits, headers.get("authorization", ""))
    rows = []
    try:
        async with (
            httpx.AsyncClient(timeout=options.timeout) as direct,
            in_process_proxy(_settings(options), transport) as proxy,
        ):
            for check in CHECKS:
                row = await _one(check, context, direct, proxy, transport, url, headers, limits)
                rows.append(row)
            native = await native_responses.probe(direct, base_url, headers, options.model, limits)
        await _try_suggestions(options, rows, transport)
    finally:
        await transport.close()
    return rows, native


async def _try_suggestions(
    options: Options, rows: list[Row], transport: AnsweringTransport
) -> None:
    """The checks a suggested key is for, sent once more through a proxy configured with it,
    so the report says whether the suggestion works rather than hoping it does."""
    table = suggested(options.upstream, options.model, rows)["upstream"]
    keys = {check: key for check, key, _ in HELPFUL_KEYS if key in table}
    if not keys:
        return
    settings = _settings(options).with_values(
        {f"upstream.{key}": table[key] for key in keys.values()}, text=False
    )
    async with in_process_proxy(settings, transport) as proxy:
        for row in rows:
            if row.name in keys:
                response = await through_proxy(proxy, json_codec.dumps(row.request))
                tried = row_for(row.name, row.request, row.expects, Answer(0, b"", False), response)
                key = keys[row.name]
                row.with_config = (f"{key} = {value_text(table[key])}", tried.after)


async def _one(
    check: Check,
    context: Context,
    direct: httpx.AsyncClient,
    proxy: httpx.AsyncClient,
    transport: AnsweringTransport,
    url: str,
    headers: dict[str, str],
    limits: Limits,
) -> Row:
    request = check.body(context)
    body = json_codec.dumps(request)
    try:
        cassette = await send(direct, url, headers, body, limits, stop_unreachable=True)
    except Unreachable as exc:  # every other check would fail the same way: one line, exit 2
        raise Refused(str(exc)) from None
    transport.add(cassette)
    streamed = bool(request.get("stream"))
    answer = _answer(cassette, streamed)
    context.calls[check.name] = answer.calls
    response = await through_proxy(proxy, body)
    return row_for(check.name, request, check.expects_calls, answer, response)


def _answer(cassette: Cassette, streamed: bool) -> Answer:
    answer = read_answer(cassette.status, upstream_text(cassette), streamed)
    if cassette.status == 0:
        answer.error = upstream_body(cassette).decode()
    return answer


def row_for(
    name: str, request: dict[str, Any], expects: int, answer: Answer, response: httpx.Response
) -> Row:
    """One exchange judged twice, as the upstream sent it and as the proxy delivered it."""
    streamed = bool(request.get("stream")) and response.headers.get("content-type", "").startswith(
        "text/event-stream"
    )
    after = read_answer(response.status_code, response.content, streamed)
    return Row(
        name,
        problems(answer, request, expects),
        problems(after, request, expects),
        _repairs(response),
        request,
        expects,
    )


def _repairs(response: httpx.Response) -> dict[str, int]:
    """The debug comment's count (the whole stream's) when there is one, else the header's."""
    for line in reversed(response.content.split(b"\n")):
        if line.startswith(COMMENT):
            return parse_repairs(line[len(COMMENT) :].decode())
    return parse_repairs(response.headers.get("x-streamfix-repairs", ""))


def _from_recordings(directory: Path, as_json: bool) -> int:
    groups = asyncio.run(_offline(directory))
    if as_json:
        document = recorded.as_json(directory, groups)
        print(json_codec.dumps_indented(document).decode())
    else:
        print(recorded.as_text(directory, groups, _colour()), end="")
    return 1 if recorded.unfixed(groups) else 0


async def _offline(directory: Path) -> list[recorded.Recorded]:
    """Each cassette replayed through today's proxy and judged, grouped by the upstream and
    profile it was recorded against (in the order first seen; within one, in file order)."""
    paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not paths:
        raise Refused(f"--from {directory}: no cassettes (*.json) in this directory")
    groups: dict[tuple[str, str], recorded.Recorded] = {}
    for path in paths:
        try:
            cassette = Cassette.load(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Refused(f"{path}: not a readable cassette ({exc})") from exc
        base_url = masked_url(cassette.upstream_base_url) or recorded.NOT_RECORDED
        key = (base_url, cassette.profile)
        group = groups.setdefault(key, recorded.Recorded(base_url, cassette.profile))
        request = cassette.body_json if isinstance(cassette.body_json, dict) else {}
        streamed = bool(request.get("stream"))
        answer = read_answer(cassette.status, upstream_text(cassette), streamed)
        response = await replayed(
            cassette,
            settings_for(cassette, Settings()),
            credential=DOCTOR_TENANT,
            headers={"x-streamfix-debug": "1"},
        )
        expects = 1 if request.get("tool_choice") == "required" else 0
        group.rows.append(row_for(path.stem, request, expects, answer, response))
    return list(groups.values())
