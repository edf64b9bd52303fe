"""What the end-to-end tests send the proxy: a minimal chat request body, and the client timeout."""

from __future__ import annotations

from typing import Any

import httpx

CLIENT_TIMEOUT = httpx.Timeout(10.0)


def chat(model: str, **extra: Any) -> dict[str, Any]:
    """A one-message chat request for `model`, with `extra` fields (`stream=True`, `tools`, ...)."""
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}
