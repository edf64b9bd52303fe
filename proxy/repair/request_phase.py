"""Phase one of an exchange: the request repairs, run in order, ending in a frozen `Forwarded`.

A request repair edits the client's body in place and says whether it changed anything; when
none did, the server sends the client's own bytes upstream (byte for byte). A repair that
raises does not stop the request: it goes on as the repairs before it left it, and the failure
is logged with the repair's name (strict mode, the tests', re-raises).

To build the forwarded request again with other rules (a resend), parse the client's bytes
again and run `request_phase` on them: the body handed in is the one edited.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from proxy.repair.forwarded import NO_NAMES, Forwarded
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestContext:
    """What a request repair reads besides the body (the rules, the scope), counts on (the
    tally), and leaves for the repairs after it or for the stream (the decisions)."""

    rules: RouteRules
    scope: ReceiptScope
    tally: Tally
    tool_names_back: dict[str, str] = field(default_factory=dict)
    """Decided by ToolNamesRenamed: the new names -> the client's, for the answer."""
    receipts_found: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Looked up by ReceiptLookup (one store read), for the receipt repairs after it."""


class RequestRepair:
    """One fix to the request before it goes upstream. Built once per process (it keeps nothing
    between exchanges): what it decides for the answer goes into the context."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        """Edit `body` in place; True when it changed."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """How the logs name it."""
        return type(self).__name__


async def request_phase(
    body: dict[str, Any],
    rules: RouteRules,
    scope: ReceiptScope,
    tally: Tally,
    repairs: Sequence[RequestRepair],
    *,
    strict: bool = False,
) -> tuple[Forwarded, bool]:
    """Run `repairs` on the client's `body` (edited in place) and return what goes upstream,
    and whether any of them changed it."""
    context = RequestContext(rules, scope, tally)
    changed = False
    for repair in repairs:
        try:
            changed |= await repair.apply(body, context)
        except Exception:
            if strict:
                raise
            logger.exception("repair %s failed; passing data unrepaired", repair.name)
    return forwarded_from(body, context), changed


def forwarded_from(body: dict[str, Any], context: RequestContext) -> Forwarded:
    """The frozen value of a finished request phase."""
    names = MappingProxyType(context.tool_names_back) if context.tool_names_back else NO_NAMES
    return Forwarded(body, context.rules, context.scope, names)
