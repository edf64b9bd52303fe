"""The doors: each protocol a client may speak to the proxy, declared once, in its own module
(chat.py, responses.py, messages.py), on the one exchange runner (server/exchange_runner.py).
A door's route, its `streamfix.front` on spans and its name in replay all come from its
declaration here."""

from __future__ import annotations

from proxy.server.doors.chat import CHAT
from proxy.server.doors.messages import MESSAGES
from proxy.server.doors.responses import RESPONSES

DOORS = (CHAT, RESPONSES, MESSAGES)
"""Every door, the chat door first (the hot path)."""
