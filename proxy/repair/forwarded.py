"""What the request phase decided, frozen: the value the stream phase is built from.

The request repairs run first (request_phase.py) and end in a `Forwarded`: the body as it goes
upstream, the route's rules, the receipt scope, and the decisions a request repair made that
the answer needs (the tool names to give back). Every stream link is built from it afterwards
(repairs/__init__.py `stream_links`), so a link knows before the first event whether it has
anything to do, and reads the declared tools from here instead of re-reading the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from proxy.repair.calls.declared import DeclaredTools
from proxy.repair.rules import RouteRules
from proxy.repair.tenancy import ReceiptScope

NO_NAMES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)  # not slots: the lazily read values below are cached on the instance
class Forwarded:
    body: dict[str, Any]
    """The request as forwarded upstream, after every request repair. The links read it and
    never edit it."""
    rules: RouteRules = field(default_factory=RouteRules)
    """What the route's upstream needs and allows, resolved once per route and profile
    (`UpstreamRoute.rules`), with what its upstream refused before (learning/refusals.py)."""
    scope: ReceiptScope = field(default_factory=lambda: ReceiptScope(None, "none"))
    """No tenant unless the request showed a credential: no receipts kept or given."""
    tool_names_back: Mapping[str, str] = field(default_factory=lambda: NO_NAMES)
    """Tool names the request went up with -> the client's (ToolNamesRenamed's decision)."""

    @cached_property
    def declared_tools(self) -> DeclaredTools | None:
        """The function tools a call may name, as they went upstream (renamed, rewritten for
        the dialect): the model names its calls as it was told. Read once, on first use."""
        return DeclaredTools.of(self.body)

    @cached_property
    def turn(self) -> int:
        """How many messages the request carried: seeds the ids the links make, so a replayed
        exchange gets the same ones."""
        messages = self.body.get("messages")
        return len(messages) if isinstance(messages, list) else 0
