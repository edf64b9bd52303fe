"""Where a request carries a credential, named once: tenancy hashes them, the upstream side
drops them beside a route's own key, cassettes and `streamfix config` never show them."""

from __future__ import annotations

# OpenAI's Authorization, Anthropic's x-api-key, Google's x-goog-api-key, Azure's api-key.
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
# Query parameters that carry one (Google's `?key=`).
CREDENTIAL_PARAMETERS = frozenset({"key", "api_key", "api-key", "access_token"})
# In a configured URL, also what redis-py reads (`?password=`) and generic tokens.
SECRET_PARAMETERS = CREDENTIAL_PARAMETERS | {"password", "token"}
