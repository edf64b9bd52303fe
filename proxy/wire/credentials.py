"""Where a request carries a credential, named once: tenancy hashes them, the upstream side
drops them beside a route's own key, cassettes, logs and `streamfix config` never show them."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

# OpenAI's Authorization, Anthropic's x-api-key, Google's x-goog-api-key, Azure's api-key.
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
# Query parameters that carry one (Google's `?key=`).
CREDENTIAL_PARAMETERS = frozenset({"key", "api_key", "api-key", "access_token"})
# In a configured URL, also what redis-py reads (`?password=`) and generic tokens.
SECRET_PARAMETERS = CREDENTIAL_PARAMETERS | {"password", "token"}

MASK = "****"


def masked_url(url: str) -> str:
    """`url` fit to print: its user information (a password, or a token used as the user name:
    `http://token@proxy`) and the values of its secret query parameters become `****`. Works
    on URLs too malformed to connect to, since their error messages show them."""
    parts = urlsplit(url)
    _, at, hostport = parts.netloc.rpartition("@")
    netloc = f"{MASK}@{hostport}" if at else parts.netloc
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(name.lower() in SECRET_PARAMETERS for name, _ in pairs):
        shown = [(n, MASK if n.lower() in SECRET_PARAMETERS else v) for n, v in pairs]
        parts = parts._replace(query=urlencode(shown, safe="*"))
    return parts._replace(netloc=netloc).geturl() if at or pairs else url
