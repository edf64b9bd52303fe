"""Which GenAI provider a route's upstream is, in OpenTelemetry's words (`gen_ai.provider.name`
on spans, `gen_ai_provider_name` on the token metrics), decided once per route.

The base URL's host says it first: OpenTelemetry's well-known values where one applies (its
GenAI registry lists them), else a name of the same form for the hosts streamfix knows. Else
the route's configured profile (`upstream.profile`, a local vLLM named as such), else the
route's own name: a provider the proxy cannot name is named as the operator named its route.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from urllib.parse import urlsplit

# Host pattern -> provider name (fnmatch, on the lower-cased host), first match wins.
_BY_HOST = (
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("*-aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("api.openai.com", "openai"),
    ("*.openai.azure.com", "azure.ai.openai"),
    ("*.services.ai.azure.com", "azure.ai.inference"),
    ("models.inference.ai.azure.com", "azure.ai.inference"),
    ("bedrock-runtime.*.amazonaws.com", "aws.bedrock"),
    ("api.anthropic.com", "anthropic"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.groq.com", "groq"),
    ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"),
    ("api.cohere.ai", "cohere"),
    ("api.cohere.com", "cohere"),
    ("*.ml.cloud.ibm.com", "ibm.watsonx.ai"),
    # Not in OpenTelemetry's list: named the way its own names are.
    ("openrouter.ai", "openrouter"),
    ("api.moonshot.ai", "moonshot_ai"),
    ("api.moonshot.cn", "moonshot_ai"),
    ("api.cerebras.ai", "cerebras"),
    ("api.together.xyz", "together_ai"),
    ("api.fireworks.ai", "fireworks_ai"),
)

# A configured profile (proxy/repair/profiles.py) -> provider name, where the two differ.
_BY_PROFILE = {
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "kimi": "moonshot_ai",
}
_UNNAMED_PROFILES = frozenset({"auto", "generic"})
"""Profiles that say nothing about who the upstream is."""


def provider_name(base_url: str, profile: str, route: str) -> str:
    """The provider `gen_ai.provider.name` gives for a route to `base_url`."""
    host = (urlsplit(base_url).hostname or "").lower()
    for pattern, name in _BY_HOST:
        if fnmatchcase(host, pattern):
            return name
    if profile not in _UNNAMED_PROFILES:
        return _BY_PROFILE.get(profile, profile)
    return route
