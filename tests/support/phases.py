"""The two phases driven directly, for tests that reach past the server: a request repair run
on a body, a `Forwarded` to build links from, and the default phases of a configuration."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.repair.forwarded import Forwarded
from proxy.repair.phases import Phases
from proxy.repair.pipeline import RepairChain
from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.store.memory_store import MemoryStore
from proxy.store.protocol import Store

NO_TENANT = ReceiptScope(None, "none")


def forwarded(
    request: dict[str, Any] | None = None,
    rules: RouteRules | None = None,
    scope: ReceiptScope = NO_TENANT,
) -> Forwarded:
    """What a request phase that changed nothing would hand the links."""
    return Forwarded(request if request is not None else {}, rules or RouteRules(), scope)


def apply(
    repair: RequestRepair,
    body: dict[str, Any],
    rules: RouteRules | None = None,
    scope: ReceiptScope = NO_TENANT,
    tally: Tally | None = None,
) -> tuple[bool, RequestContext]:
    """One request repair on `body` (edited in place): whether it changed it, and the context
    it counted on and left its decisions in."""
    context = RequestContext(rules or RouteRules(), scope, tally or Tally("test"))
    changed = asyncio.run(repair.apply(body, context))
    return changed, context


def phases(settings: Settings | None = None, store: Store | None = None) -> Phases:
    """The default phases of `settings`, strict (a failing repair raises)."""
    options = chain_options((settings or Settings()).with_values({"repairs.strict": True}))
    return Phases(options, store or MemoryStore(max_entries=100, ttl_seconds=60))


def exchange(
    body: dict[str, Any],
    rules: RouteRules | None = None,
    *,
    settings: Settings | None = None,
    store: Store | None = None,
    scope: ReceiptScope = NO_TENANT,
    tally: Tally | None = None,
) -> tuple[RepairChain, Forwarded, Tally, bool]:
    """Both phases as the server runs them: the request phase on `body` (edited in place),
    then the stream links built from what it decided."""
    tally = tally or Tally("test")
    both = phases(settings, store)
    forwarded, changed = asyncio.run(both.request(body, rules or RouteRules(), scope, tally))
    return both.stream(forwarded, tally), forwarded, tally, changed
