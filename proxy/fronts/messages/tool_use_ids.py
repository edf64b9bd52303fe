"""Call ids in Anthropic's alphabet for Messages clients, and the upstream's own ids back.

Anthropic's API takes a `tool_use` block's `id` (and a `tool_result`'s `tool_use_id`) only in
`^[a-zA-Z0-9_-]+$`. Kimi names its calls `functions.NAME:N` (its chat template writes the id
into the prompt, and it is the only place the model sees the call's name again), so a Claude
Code transcript that kept those ids is refused by Anthropic's own API when it resumes there,
and a client that checks the alphabet refuses it at once.

An id in the alphabet goes to the client as it came. Any other is written in it: a prefix, then
the id's UTF-8 in unpadded base64url (whose alphabet is Anthropic's). The way back reads the
prefix and decodes, with no store: any replica restores the id, on any turn. An upstream id that
happens to begin with the prefix is written the same way, so every id the client is given comes
back to exactly the one the upstream issued. What decides is the id's shape, never the vendor.
"""

from __future__ import annotations

import base64
import binascii
import re

ALPHABET = re.compile(r"[A-Za-z0-9_-]+")
"""Anthropic's `tool_use.id` pattern, `^[a-zA-Z0-9_-]+$`."""
PREFIX = "toolu_sf_"
"""What an id written in the alphabet begins with (never an id Anthropic issues: its own are
`toolu_` then letters and digits only)."""


def client_id(upstream_id: str) -> str:
    """The id a Messages client is given for the upstream's `upstream_id`."""
    if ALPHABET.fullmatch(upstream_id) and not upstream_id.startswith(PREFIX):
        return upstream_id
    encoded = base64.urlsafe_b64encode(upstream_id.encode()).rstrip(b"=").decode("ascii")
    return PREFIX + encoded


def upstream_id(given: str) -> str:
    """The upstream's own id for an id a client sends back: decoded when this module wrote it,
    else as given (an id the client or another API issued)."""
    if not given.startswith(PREFIX):
        return given
    encoded = given[len(PREFIX) :]
    if not ALPHABET.fullmatch(encoded):
        return given
    try:
        decoded = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return given
    return decoded if client_id(decoded) == given else given
