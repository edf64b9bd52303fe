"""Text logs (proxy/server/logs.py): a control character in a client's value cannot forge a log
line, and ordinary lines and tracebacks are unchanged.

Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import logging
import re
import sys

import httpx
import orjson
import pytest

from proxy.server.logs import JsonFormatter, TextFormatter, configure_logging, escape_controls
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy

TIMEOUT = httpx.Timeout(10.0)


FORGED_MODEL = (
    "m\n2026-01-01 INFO proxy.server.app forged\r\x1b[2K\x1b[1Aclean\x00\x7f\x9b\u2028end"
)


def installed_text_formatter() -> logging.Formatter:
    """The formatter `configure_logging` installs for text logs (the root's handlers are put
    back: pytest's capture lives there)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("info", "text")
        formatter = root.handlers[0].formatter
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert formatter is not None
    return formatter


def test_a_model_with_control_characters_cannot_forge_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: the exchange line printed the model as sent, so its newline started a line that
    # read as the proxy's own, and its escape sequences could rewrite the terminal.
    caplog.set_level(logging.INFO)
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        body = {"model": FORGED_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    (record,) = [r for r in caplog.records if r.name == "proxy.server.app" and "route=" in r.msg]
    assert FORGED_MODEL in record.getMessage()  # the record itself is what was sent
    line = installed_text_formatter().format(record)
    assert len(line.splitlines()) == 1, line
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", line), repr(line)
    assert "model=m\\n2026-01-01 INFO proxy.server.app forged\\r\\x1b[2K\\x1b[1Aclean" in line
    assert "\\x00\\x7f\\x9b\\u2028end" in line
    json_line = JsonFormatter().format(record)
    assert len(json_line.splitlines()) == 1, repr(json_line)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", json_line), repr(json_line)
    assert orjson.loads(json_line)["model"] == FORGED_MODEL  # escaped, not altered


def test_ordinary_lines_are_unchanged_and_tracebacks_keep_their_lines() -> None:
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    text = TextFormatter()
    record = logging.LogRecord(
        "proxy.server.app", logging.INFO, "f", 1, "[%s] route=%s é ✓", ("r", "x"), None
    )
    assert text.format(record) == plain.format(record)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failing = logging.LogRecord("p", logging.ERROR, "f", 1, "a\nb", (), sys.exc_info())
    lines = text.format(failing).splitlines()
    assert lines[0].endswith("a\\nb") and lines[1] == "Traceback (most recent call last):"
    assert escape_controls("tab\there") == "tab\\there"


def test_an_exchange_nothing_changed_reads_none_in_the_log_as_in_the_header(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: `repairs=-` in the log line beside `x-streamfix-repairs: none`: one fact, two
    # spellings to search for.
    caplog.set_level(logging.INFO)
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        response = httpx.get(f"{proxy}/v1/models", timeout=TIMEOUT)
    assert response.headers["x-streamfix-repairs"] == "none"
    (record,) = [r for r in caplog.records if r.name == "proxy.server.app" and "route=" in r.msg]
    assert record.getMessage().endswith(" repairs=none")
