"""Logging set-up: human-readable lines by default, one JSON object per line on request."""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from proxy.wire import json_codec

if TYPE_CHECKING:
    from proxy.learning.refusals import Learned
    from proxy.server.record import ExchangeRecord

# Fields an exchange log line carries in `extra={"exchange": {...}}`.
EXCHANGE = "exchange"

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators: a client's value
# (its `model`, say) carrying one could end a text log line and forge the next, or move the
# cursor and repaint a terminal.
_CONTROLS = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROLS) + "]")
_ESCAPES = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _CONTROLS}
_ESCAPES |= {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in _CONTROLS}


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\x1b`); text
    without one comes back as it is."""
    return text.translate(_ESCAPES) if _CONTROL.search(text) else text


class TextFormatter(logging.Formatter):
    """The human-readable line, one line per record whatever the message holds. Only the
    message is escaped: a traceback after it keeps its lines."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line, every control character escaped."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, EXCHANGE, None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        text = json_codec.dumps_with_str(line).decode()
        # orjson escapes C0 controls only; DEL, C1 and U+2028/9 are valid JSON as they are, but
        # a terminal or a line splitter may act on them. Outside strings JSON has none of them.
        return text.translate(_JSON_ESCAPES) if _CONTROL.search(text) else text


def quiet_client_loggers() -> None:
    """httpx logs every request URL at INFO and DEBUG, query string included, and a query string
    can carry a credential (Google's `?key=`). The proxy logs its own line per exchange instead.
    Called when an app or the command line's logging is set up, never at import."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


# uvicorn logs its start-up, shutdown and protocol messages under "uvicorn.error", whatever
# their level: an operator reading "uvicorn.error Started server process" looks for an error.
SERVER_LOGGER_NAMES = {"uvicorn.error": "proxy.server.serving", "uvicorn": "proxy.server.serving"}


class OwnLoggerNames(logging.Filter):
    """Shows the server's records under the proxy's own logger names."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.name = SERVER_LOGGER_NAMES.get(record.name, record.name)
        return True


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    quiet_client_loggers()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(OwnLoggerNames())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_exchange(
    logger: logging.Logger, record: ExchangeRecord, status: int, duration: float
) -> None:
    """The one line an exchange gets when it is over: readable as text, and its fields whole in
    `extra` for the JSON format. Written under the caller's logger, so its name says where."""
    if not logger.isEnabledFor(logging.INFO):
        return
    tally = record.tally
    fields = {
        "request_id": tally.request_id,
        "method": record.method,
        "path": record.path,
        "route": record.route,
        "model": record.model,
        "profile": record.profile,
        "status": status,
        "duration_s": round(duration, 4),
        "repairs": dict(tally.repairs),
    }
    logger.info(
        "[%s] %s %s route=%s model=%s status=%d duration=%.3fs repairs=%s",
        tally.request_id,
        record.method,
        record.path,
        record.route,
        fields["model"],
        status,
        duration,
        tally.summary(),  # `none` when nothing changed: the header's spelling too
        extra={EXCHANGE: fields},
    )


def log_learned(logger: logging.Logger, record: ExchangeRecord, learned: Learned) -> None:
    """The line a refusal learned gets: once, with the request id, at warning level."""
    kept = " for %.0fs" if learned.ttl_seconds else ""  # a rule that remembers nothing
    logger.warning(
        "[%s] %s: route %s upstream answered %d " + learned.rule.done + kept,
        record.request_id,
        learned.kind,
        record.route,
        learned.status,
        ", ".join(learned.keys),
        *((learned.ttl_seconds,) if learned.ttl_seconds else ()),
    )
