"""Configuration: frozen dataclasses, and the one place that turns the config file, `STREAMFIX_*`
variables and flags into settings. Secrets never become settings: the proxy's own keys
(`STREAMFIX_API_KEYS`) and each route's key (`api_key_env`) are read from the environment by
the code that uses them (`server/app.py`, `routing/routes.py`), and shown only masked.

Precedence, lowest first: built-in defaults, the TOML config file, `STREAMFIX_*` environment
variables, command-line flags (passed in as `overrides`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy.repair.profiles import PROFILES
from proxy.repair.rules import RouteRuleKeys
from proxy.settings.values import (
    ConfigError,
    did_you_mean,
    field_names,
    flatten,
    is_http_url,
    one_of,
    read_toml,
    replace_checked,
)
from proxy.store.opening import host_and_port
from proxy.store.protocol import MAX_VALUE_BYTES
from proxy.store.redis_connection import TLS_VERIFY_MODES

# Old section names still read, each as the section it became.
SECTION_ALIASES = {"signatures": "receipts"}

GEMINI_OPENAI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai"

# Environment variable -> dotted config key.
ENVIRONMENT_KEYS = {
    "STREAMFIX_UPSTREAM": "upstream.base_url",
    "STREAMFIX_PROFILE": "upstream.profile",
    "STREAMFIX_HOST": "server.host",
    "STREAMFIX_PORT": "server.port",
    "STREAMFIX_WORKERS": "server.workers",
    "STREAMFIX_REPLICAS": "server.replicas",
    "STREAMFIX_LOG_FORMAT": "server.log_format",
    "STREAMFIX_LOG_LEVEL": "server.log_level",
    # The store's URL can carry a password: from a secret store's variable, not a config file.
    "STREAMFIX_RECEIPTS_STORE": "receipts.store",
}

# Dotted config key -> the `streamfix serve` / `config` flag that sets it (cli.py declares each
# flag's options and help from this; the README's configuration table names them from here).
FLAGS = {
    "upstream.base_url": "--upstream",
    "server.host": "--host",
    "server.port": "--port",
    "upstream.profile": "--profile",
    "server.workers": "--workers",
    "server.log_level": "--log-level",
    "server.log_format": "--log-format",
    "recording.record_dir": "--record",
    "recording.replay_dir": "--replay",
    "recording.replay_timing": "--replay-timing",
}

UPSTREAM_CLIENTS = ("http1", "httpx")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    """The address to listen on (the container image listens on 0.0.0.0)."""
    port: int = 8080
    """The port to listen on."""
    max_request_bytes: int = 16 * 1024 * 1024
    """Largest client request body; a larger one gets 413 and nothing goes upstream."""
    max_event_bytes: int = 8 * 1024 * 1024
    """Largest upstream SSE event; a larger one ends that stream with an error event."""
    max_response_bytes: int = 64 * 1024 * 1024
    """Largest non-streamed upstream body the proxy buffers to repair (decoded); past it 502
    `response_too_large`."""
    log_format: str = "text"
    """"text" (one human-readable line per exchange) or "json" (one JSON object per line)."""
    log_level: str = "info"
    """Least severe log records written: "info" (one line per exchange); "debug" adds each repair
    as it happens (`[id] kind +1`) and each upstream request line (`[id] upstream POST
    https://host/path`: never the query or credentials); "warning" and "error" keep only the
    problems."""
    workers: int = 1
    """Worker processes; more than one needs a shared receipt store (`receipts.store` on
    Redis), since each process has its own memory store."""
    replicas: int = 1
    """How many copies of the proxy serve the same clients (a Deployment's replicas, servers
    behind one load balancer): declared, since no replica can count the others. Above 1 with
    the memory store, or on Kubernetes with it, start-up warns that a follow-up landing on
    another replica misses its receipts."""
    shutdown_grace_seconds: float = 30.0
    """On SIGTERM: stop accepting, let open streams finish for this long, then close them."""
    trust_env: bool = True
    """Send upstream traffic through the egress proxies the environment names (HTTPS_PROXY,
    HTTP_PROXY, ALL_PROXY, NO_PROXY, in either case), as curl and httpx do; false: direct."""
    upstream_client: str = "http1"
    """"http1" (the proxy's own HTTP/1.1 client, on httptools) or "httpx" (httpx's transport,
    kept as a fallback)."""
    upstream_max_head_bytes: int = 65_536
    """Largest upstream response head (status line and fields, 1xx heads included) the own
    client reads; past it 502 `upstream_response_too_large` and the connection is dropped
    (Envoy ~60 KiB, h11 100 KiB)."""
    upstream_max_fields: int = 100
    """Most fields in one upstream response head, or in its trailers (Envoy: 100)."""
    upstream_max_line_bytes: int = 16_384
    """Longest chunk-size line (with its extensions) or trailer field from an upstream."""
    header_timeout_seconds: float = 10.0
    """A connection's request head must arrive whole within this (else 408 and close, or a
    silent close if nothing came)."""
    max_header_bytes: int = 65_536
    """Largest request head (request line and headers) accepted (else 431 and close)."""
    body_timeout_seconds: float = 30.0
    """Longest pause between two pieces of a request body (else 408 and close)."""
    body_total_timeout_seconds: float = 120.0
    """The whole request body must arrive within this, however steadily it drips (else 408;
    nothing goes upstream)."""
    max_buffered_request_bytes: int = 268_435_456
    """Request bodies being received, across all connections of a process (else 503
    `server_busy`)."""
    max_connections: int = 2048
    """Open client connections per process; one beyond it gets 503 `too_many_connections` and
    is closed."""
    keepalive_timeout_seconds: float = 5.0
    """An idle kept-alive connection is closed after this long without a new request."""
    keepalive_seconds: float = 15.0
    """A stream the client has been sent nothing on for this long gets an SSE comment
    (`: keepalive`), between whole events and never after the last one, so that nginx
    (`proxy_read_timeout` 60 s), cloud load balancers (60 s idle) and clients' read timeouts
    (often 30 s) do not cut a stream whose upstream is thinking; 0: never."""
    backlog: int = 65_535
    """Connections the kernel queues for the proxy to accept; the kernel caps it at
    `net.core.somaxconn` (4096 on Linux since 5.4). An attempt past a full queue is dropped,
    and the client tries again only a second or more later."""
    gc_freeze: bool = True
    """Keep long-lived objects (the app, open streams, pooled connections) out of the cycle
    collector's walks, so that its pauses do not grow with the open streams
    (proxy/server/gc_tuning.py); false: CPython's collector as it comes."""

    def __post_init__(self) -> None:
        one_of("log_format", self.log_format, ("text", "json"))
        one_of("log_level", self.log_level, LOG_LEVELS)
        one_of("upstream_client", self.upstream_client, UPSTREAM_CLIENTS)
        if not 0 < self.port < 65536:
            raise ConfigError(f"port: must be between 1 and 65535, got {self.port}")


PROFILE_NAMES = ("auto", *PROFILES)
"""Every profile a route may name: "auto" (detect it), or one of proxy/repair/profiles.py."""


@dataclass(frozen=True, slots=True)
class UpstreamSettings(RouteRuleKeys):
    """An upstream, and its route's rules: the keys of `RouteRuleKeys` (text_tool_calls,
    schema_dialect, tool_names, ...) are this table's too, declared beside the repairs."""

    base_url: str = GEMINI_OPENAI_BASE_URL
    """The upstream's OpenAI-compatible base URL (the part before `/chat/completions`)."""
    connect_timeout: float = 10.0
    """Seconds to connect to the upstream (then 504)."""
    read_timeout: float = 600.0
    """Seconds between two reads from the upstream (then 504, or an error event once a stream
    has started)."""
    profile: str = "auto"
    """Provider profile: "auto" takes the one the base URL's host names (`generic` for any
    other host; the model name decides nothing), or a profile by name (the README's table under
    "Routes and keys")."""
    api_key_env: str = ""
    """Name of an environment variable holding this upstream's own key (never the key); empty:
    the client's credential passes through."""
    model: str = ""
    """Model name sent upstream instead of the client's, when set; empty: as the client gave
    it."""
    retry_after_max_seconds: float = 10.0
    """A 429 whose `Retry-After` (seconds or an HTTP date) is at most this is waited out and
    the request sent once more (nothing was generated; the client leaving ends the wait); a
    longer one, none, or one the client's SDK read timeout (`x-stainless-read-timeout`) would
    not outlast reaches the client at once; 0: never. 10 s: Claude Code and the openai and
    anthropic SDKs retry a 429 themselves after its `Retry-After` (Claude Code up to 10 times,
    the SDKs twice, within 600 s timeouts), so a short wait here takes no longer than theirs
    and spares one of their few retries; a long one (a quota reset) is the client's to wait or
    report."""

    def __post_init__(self) -> None:
        one_of("profile", self.profile, PROFILE_NAMES)
        RouteRuleKeys.__post_init__(self)
        if not is_http_url(self.base_url):
            raise ConfigError(
                f"base_url: must be an http:// or https:// URL, got {self.base_url!r}"
            )


@dataclass(frozen=True, slots=True)
class RouteSettings(UpstreamSettings):
    """An upstream for the models matching `models` (shell-style patterns, first route wins)."""

    name: str = ""
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        UpstreamSettings.__post_init__(self)
        if not self.name:
            raise ConfigError("name: every route needs a name")
        if not self.models or not all(isinstance(m, str) and m for m in self.models):
            raise ConfigError("models: a non-empty list of model name patterns")


@dataclass(frozen=True, slots=True)
class ReceiptSettings:
    """What the proxy keeps of what upstreams attach to a turn (Google's thought signatures,
    `reasoning_details`, `reasoning_content`) and puts back on follow-ups. Also read as
    `[signatures]`, its name before receipts covered more than Google's."""

    store: str = "memory"
    """"memory", or a Redis URL to share receipts, learned rules and the Responses front's state
    between replicas and restarts: "redis://host:port/db", "rediss://…" for TLS. Credentials
    come from STREAMFIX_REDIS_USERNAME / STREAMFIX_REDIS_PASSWORD (they win over the URL's)."""
    max_entries: int = 100_000
    """Receipts the memory store keeps; the least recently used go first beyond it."""
    ttl_seconds: float = 86_400.0
    """How long a receipt is kept (both stores; every Redis key carries it)."""
    on_missing: str = "placeholder"
    """"placeholder": a current-turn step with no signature anywhere gets Google's documented
    `skip_thought_signature_validator`; "leave": nothing is put in its place."""
    tenant_header: str = ""
    """A header that subdivides a credential's tenant (hash of credential and header value); it
    never replaces the credential, and must be set by a trusted hop. Empty: the credential's
    hash alone."""
    max_value_bytes: int = MAX_VALUE_BYTES
    """Receipts larger than this are not stored, so no upstream can grow the store without bound
    (reasoning texts are large: DeepSeek's can run to hundreds of kilobytes)."""
    max_total_bytes: int = 268_435_456
    """The memory store's budget for all receipts; least recently used go first beyond it."""
    redis_timeout_seconds: float = 0.5
    """Longest wait for Redis to connect or answer; a whole store operation (with a Sentinel's
    or a Cluster's lookup before it) is cut at twice this. A store that does not answer costs
    the receipts of that exchange, never the exchange."""
    redis_tls_ca_file: str = ""
    """PEM file of the CA that signed Redis's certificate (`rediss://` only); empty: the
    system's CAs."""
    redis_tls_cert_file: str = ""
    """PEM client certificate, for a Redis that asks for one (`tls-auth-clients`)."""
    redis_tls_key_file: str = ""
    """The client certificate's private key (PEM), when it is not in the certificate file."""
    redis_tls_verify: str = "full"
    """"full": Redis's certificate must chain to the CA and name the host; "ca": chain to the CA
    only (a certificate issued for another name); "none": encrypt without verifying (tests)."""
    redis_sentinels: tuple[str, ...] = ()
    """Sentinels as "host:port" (26379 when no port): the master is asked of them, and followed
    through failovers; the store URL then gives only the scheme and the database."""
    redis_service_name: str = ""
    """The master's name the sentinels know (`sentinel monitor NAME …`); needed with
    `redis_sentinels`."""
    redis_cluster: bool = False
    """The store URL names one node of a Redis Cluster; the client finds the others (database
    0 only)."""

    def __post_init__(self) -> None:
        one_of("on_missing", self.on_missing, ("placeholder", "leave"))
        one_of("redis_tls_verify", self.redis_tls_verify, TLS_VERIFY_MODES)
        if self.store != "memory" and not self.store.startswith(("redis://", "rediss://")):
            raise ConfigError(f'store: must be "memory" or a redis:// URL, got {self.store!r}')
        self._check_redis()

    def _check_redis(self) -> None:
        """A Redis option the URL cannot use is a mistake said at start-up: TLS files with a
        plain `redis://` would otherwise send everything in clear text without a word."""
        tls_files = self.redis_tls_ca_file or self.redis_tls_cert_file or self.redis_tls_key_file
        if tls_files and not self.store.startswith("rediss://"):
            raise ConfigError("redis_tls_*: TLS files need a rediss:// store URL")
        if self.redis_tls_key_file and not self.redis_tls_cert_file:
            raise ConfigError("redis_tls_key_file: needs redis_tls_cert_file")
        if self.redis_sentinels and self.redis_cluster:
            raise ConfigError("redis_sentinels: cannot be used with redis_cluster")
        if bool(self.redis_sentinels) != bool(self.redis_service_name):
            raise ConfigError("redis_service_name: set together with redis_sentinels")
        if (self.redis_sentinels or self.redis_cluster) and self.store == "memory":
            raise ConfigError("redis_sentinels, redis_cluster: need a redis:// store URL")
        for entry in self.redis_sentinels:
            host_and_port(entry)
        if self.redis_cluster and urlsplit(self.store).path.strip("/") not in ("", "0"):
            raise ConfigError("redis_cluster: a cluster has database 0 only")


@dataclass(frozen=True, slots=True)
class ParameterSettings:
    """What the proxy remembers of parameters upstreams rejected (`learn_rejected_parameters`):
    kept in the receipts' store (`[receipts] store`; Redis shares them between replicas) under
    their own keys."""

    ttl_seconds: float = 86_400.0
    """How long a rejected parameter is dropped up front, or a request rule learned from a
    refusal applied, before it is tried again."""
    max_entries: int = 10_000
    """The memory store's bound (upstream, model and parameter per entry); oldest go first.
    With `receipts.store` on Redis, the TTL bounds them."""

    def __post_init__(self) -> None:
        if self.ttl_seconds <= 0 or self.max_entries <= 0:
            raise ConfigError("ttl_seconds, max_entries: must be positive")


@dataclass(frozen=True, slots=True)
class ToolCallSettings:
    emit: str = "auto"
    """"auto": each call decided from the wire: one streamed as OpenAI streams it (an opening
    delta with index, id, type and name, then its argument text) that no fix could change goes
    on as the bytes received, fragments included; any other (no index, id or name yet, a
    previous call still open, a schema property that may arrive double-encoded) is held, with
    every later call of its choice, and sent as "atomic" sends it. "atomic": each call once,
    complete, before its finish chunk; "incremental": an opening delta with index, id, type
    and name, then the argument fragments."""
    max_buffered_bytes: int = 8 * 1024 * 1024
    """Tool-call arguments one exchange may hold while assembling calls; past it the stream
    ends with an error event (the calls cannot be delivered whole)."""

    def __post_init__(self) -> None:
        one_of("emit", self.emit, ("auto", "atomic", "incremental"))


@dataclass(frozen=True, slots=True)
class HistorySettings:
    repair: bool = True
    """Heal the request's tool-call history (orphan results, missing results, duplicates)."""


@dataclass(frozen=True, slots=True)
class RecordingSettings:
    record_dir: str = ""
    """Write one cassette per exchange here (live traffic still flows)."""
    replay_dir: str = ""
    """Serve upstream answers from the cassettes here, with no network."""
    replay_timing: bool = False
    """Replay chunks with their recorded arrival times instead of at once."""
    secret_headers: tuple[str, ...] = ()
    """Extra request/response headers never written to a cassette (credentials never are,
    whatever this says)."""

    def __post_init__(self) -> None:
        if self.record_dir and self.replay_dir:
            raise ConfigError("record_dir: cannot be set together with replay_dir")
        if not all(isinstance(name, str) for name in self.secret_headers):
            raise ConfigError("secret_headers: must be a list of header names")


@dataclass(frozen=True, slots=True)
class RepairSettings:
    enabled: bool = True
    """false makes the proxy a plain forwarding proxy: no repair runs, nothing is changed."""
    strict: bool = False
    """Re-raise a failing repair instead of passing the chunk unrepaired (tests use this)."""


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    tool_calls: ToolCallSettings = field(default_factory=ToolCallSettings)
    receipts: ReceiptSettings = field(default_factory=ReceiptSettings)
    parameters: ParameterSettings = field(default_factory=ParameterSettings)
    history: HistorySettings = field(default_factory=HistorySettings)
    recording: RecordingSettings = field(default_factory=RecordingSettings)
    routes: tuple[RouteSettings, ...] = ()
    """Tried in order before the default route (`upstream`)."""
    repairs: RepairSettings = field(default_factory=RepairSettings)

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        """Build settings from a config file, the environment and flags (dotted keys).

        Each source is applied on its own, lowest first, so each one's values are checked
        (a bad value in the file is reported even when a flag sets the same key) and an error
        says which source it came from. The file's values are typed (TOML's own types); the
        environment's and the flags' strings are parsed (`convert`)."""
        environ = environ if environ is not None else {}
        path = path or environ.get("STREAMFIX_CONFIG")
        settings = cls()
        if path:
            values = flatten(read_toml(Path(path)))
            settings = settings._applied(values, f"in config file {path}", text=False)
        variables = {key: name for name, key in ENVIRONMENT_KEYS.items() if environ.get(name)}
        values = {key: environ[name] for key, name in variables.items()}
        settings = settings._applied(values, "from the environment", text=True, names=variables)
        flags = {key: value for key, value in (overrides or {}).items() if value is not None}
        return settings._applied(flags, "from the command line", text=True)

    def _applied(
        self,
        values: Mapping[str, Any],
        source: str,
        text: bool,
        names: Mapping[str, str] | None = None,
    ) -> Settings:
        """`with_values`, its error saying where the value came from (`names`: key -> the
        environment variable that set it)."""
        try:
            return self.with_values(values, text=text)
        except ConfigError as exc:
            message = str(exc)
            named = [name for key, name in (names or {}).items() if message.startswith(f"{key}:")]
            where = f"{source}, {', '.join(named)}" if named else source
            raise ConfigError(f"{message} ({where})") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Settings:
        """The inverse of `to_dict` (how worker processes receive the parent's settings)."""
        return cls().with_values(flatten(document))

    def with_values(self, values: Mapping[str, Any], text: bool = True) -> Settings:
        """A copy with dotted keys (`"tool_calls.emit"`) set, each checked and converted;
        `text`: strings for non-string keys are parsed, as the environment's are (`convert`)."""
        sections: dict[str, dict[str, Any]] = {}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key == "routes":
                changes["routes"] = _routes(value, text)
                continue
            section, _, name = key.partition(".")
            sections.setdefault(section, {})[name] = value
        for alias, section in SECTION_ALIASES.items():
            if alias in sections and section in sections:
                raise ConfigError(
                    f"{alias}: the old name of [{section}]; set one of them, not both"
                )
        for section, items in sections.items():
            # An alias keeps its own name in errors: the user sees the key they wrote.
            name = SECTION_ALIASES.get(section, section)
            known = name in field_names(self) and name != "routes"
            current = getattr(self, name) if known else None
            if current is None:
                sections_known = [*field_names(self) - {"routes"}, *SECTION_ALIASES]
                hint = did_you_mean(section, sections_known)
                raise ConfigError(f"{section}: unknown config section{hint}")
            changes[name] = replace_checked(section, current, items, text)
        return replace(self, **changes)


def _routes(tables: Any, text: bool) -> tuple[RouteSettings, ...]:
    if not isinstance(tables, list | tuple) or not all(isinstance(t, Mapping) for t in tables):
        raise ConfigError("routes: must be a list of [[routes]] tables")
    routes = tuple(
        replace_checked(f"routes[{i}]", RouteSettings(name="-", models=("-",)), table, text)
        for i, table in enumerate(tables)
    )
    names = [route.name for route in routes]
    if len(set(names)) != len(names):
        raise ConfigError(f"routes: route names must be unique, got {names}")
    return routes
