"""Provider profiles: what an upstream needs, decided once per request, never in the stream loop.

A profile comes from configuration (`upstream.profile`), else from the base URL's host, else
from the request's model name (a local server on 127.0.0.1 serving `gemini-…` gets Google's
rules without extra flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

Path = tuple[str, ...]

SIGNATURE: Path = ("extra_content", "google", "thought_signature")
# Reported for Vertex's OpenAI endpoint; captured and returned the same way when it appears.
VERTEX_SIGNATURE: Path = ("extra_content", "vertex", "thought_signature")

# Google documents this value for history it cannot validate (another model's trace, a lost
# signature): the request is accepted without the signature check.
SKIP_SIGNATURE_VALIDATOR = "skip_thought_signature_validator"


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    name: str
    call_receipts: tuple[Path, ...] = ()
    """Fields of a tool call that the upstream hands out and needs back unchanged."""
    text_receipts: tuple[Path, ...] = ()
    """Fields of a text-only assistant message that the upstream needs back."""
    first_call_placeholder: tuple[Path, str] | None = None
    """Where and what to put for a current-turn step whose first call has no receipt."""
    foreign_metadata: tuple[Path, ...] = ()
    """Fields another provider issued that this upstream must never receive."""

    @property
    def keeps_receipts(self) -> bool:
        return bool(self.call_receipts or self.text_receipts)


_GOOGLE = {
    "call_receipts": (SIGNATURE, VERTEX_SIGNATURE),
    "text_receipts": (SIGNATURE, VERTEX_SIGNATURE),
    "first_call_placeholder": (SIGNATURE, SKIP_SIGNATURE_VALIDATOR),
}
_NOT_GOOGLE = {"foreign_metadata": (("extra_content", "google"), ("extra_content", "vertex"))}

PROFILES: dict[str, ProviderProfile] = {
    "gemini": ProviderProfile("gemini", **_GOOGLE),
    "vertex": ProviderProfile("vertex", **_GOOGLE),
    "openai": ProviderProfile("openai", **_NOT_GOOGLE),
    "openrouter": ProviderProfile("openrouter", **_NOT_GOOGLE),
    "vllm": ProviderProfile("vllm", **_NOT_GOOGLE),
    "kimi": ProviderProfile("kimi", **_NOT_GOOGLE),
    "generic": ProviderProfile("generic", **_NOT_GOOGLE),
}

# Host suffix -> profile name.
_HOSTS = (
    ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "vertex"),
    ("openrouter.ai", "openrouter"),
    ("api.openai.com", "openai"),
    ("api.moonshot.ai", "kimi"),
    ("api.moonshot.cn", "kimi"),
)


def profile_from_base_url(base_url: str) -> str | None:
    host = (urlsplit(base_url).hostname or "").lower()
    for suffix, name in _HOSTS:
        if host == suffix or host.endswith("." + suffix) or host.endswith("-" + suffix):
            return name
    return None


def profile_for(configured: str, base_url: str, model: object) -> ProviderProfile:
    """The profile that applies to one request."""
    if configured != "auto":
        return PROFILES[configured]
    by_host = profile_from_base_url(base_url)
    if by_host is not None:
        return PROFILES[by_host]
    if isinstance(model, str) and "gemini" in model.lower():
        return PROFILES["gemini"]
    return PROFILES["generic"]
