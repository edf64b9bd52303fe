"""Learning from an upstream's refusal, at the upstream seam: one component that owns the
detection, the memory and the single resend.

An OpenAI-compatible upstream refuses a whole request, before generating anything (a 400 or a
422, so nothing ran and nothing is billed), over one thing in it it does not take, and says
what in its error body. Each `RefusalRule` reads one kind of such refusal: what it names
(`detect`), how the request goes without it (`apply`, or the request phase built again with
`adjust`), and how a later request goes without it up front (`adjust`, on the rules the request
phase reads). The rules are table entries (`RULES`): the top-level parameters
(parameter_fallback.py) and every request rule (refusal_rules.py); a new refusal is one more
entry, and the seam below stays as it is. A part no repair can stand in for (a PDF a text model
refuses: refused_parts.py) is learned the same way but never sent again: its refusal stands,
and the server answers the next request carrying one at once (`Recalled.refused_part`).

`RefusalLearning` sits between the app and the transport: the app hands it the request once
(`send`), and it sends it, reads a refusal (bounded), and sends it once more without what was
refused; never more than once, never for another status. A rule whose fix is a request repair
(a schema dialect, tool names, a message shape) does not edit the forwarded body: the app's
`rebuild` runs the request phase again on the client's request with the adjusted rules, so the
repair exists once, and the answer's side (tool names mapped back) knows what was sent. What
it learned is remembered per (upstream, model) in the store backend's own namespace (Redis
shares it between replicas; a rule whose refusal holds for that request only, `remembers`
false, keeps nothing), and `recall` gives it back before the next request's repairs run.
A route key set explicitly is never learned over (`RouteRules.learnable`). It reports what it
did as a value (`Learned`), which the server counts and logs: the seam never reaches into the
exchange.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from proxy.learning.answer_rules import TEMPLATE_OPENS_THINK
from proxy.learning.parameter_fallback import PARAMETERS
from proxy.learning.refusal_memory import RefusalMemory, key_name, open_memory, with_value
from proxy.learning.refusal_reading import read_refusal, resent
from proxy.learning.refusal_rules import REQUEST_RULES, TOKEN_LIMIT_RULES
from proxy.learning.refused_parts import REFUSED_PARTS, RefusedPart
from proxy.learning.token_ratios import MEMORY_KEY as TOKENS_KEY
from proxy.learning.token_ratios import TokenRatio, TokenRatios
from proxy.repair.rules import RouteRules
from proxy.settings.schema import Settings
from proxy.store.protocol import Store
from proxy.wire import json_codec


class RefusalRule(Protocol):
    """One kind of refusal an upstream answers before generating, and what to do about it."""

    @property
    def kind(self) -> str:
        """What a learned refusal is counted as (`parameter_learned`)."""

    @property
    def statuses(self) -> frozenset[int]:
        """The statuses this refusal comes with; any other answer is never read."""

    @property
    def done(self) -> str:
        """The log line's account of what was done, `%s` receiving the keys learned."""

    @property
    def remembers(self) -> bool:
        """Whether what it reads holds for the upstream and model (remembered), or for this
        request only (resent, nothing kept)."""

    def detect(self, error: str, request: Mapping[str, Any]) -> tuple[str, ...]:
        """The memory keys of what the error body refuses in `request`; () when it is not
        this rule's refusal, or when going without it would answer another question."""

    def learns(self, rules: RouteRules) -> bool:
        """Whether the route lets this rule be learned (its key left "auto"), and it would
        change something there."""

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        """Edit the forwarded body for the resend, so it goes without what was refused; False
        when the fix is a request repair's, which the request phase runs again on the client's
        request with `adjust` (the seam's `rebuild`)."""

    def candidates(self, request: Mapping[str, Any]) -> list[str]:
        """The memory keys a request like this one could have learned (looked up in one go)."""

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        """The rules the request phase reads, with what was learned for this upstream and
        model, so the repairs leave it out up front."""


RULES: tuple[RefusalRule, ...] = (
    *TOKEN_LIMIT_RULES,
    PARAMETERS,
    *REQUEST_RULES,
    *REFUSED_PARTS,
    TEMPLATE_OPENS_THINK,
)
"""Every refusal learned, in the order their detection is tried (the first that names
something in the request is the one acted on): the completion budget's first (a text naming
`max_tokens` too large must lower it, never drop it); the parts no repair stands in for
(refused_parts.py) after every rule that sends again; last, the rule an answer teaches
(answer_rules.py), which no refusal calls for."""


@dataclass(frozen=True, slots=True)
class Learned:
    """What one resend was for: the rule, the refusal's status and what it named."""

    rule: RefusalRule
    status: int
    keys: tuple[str, ...]
    ttl_seconds: float
    """How long it is remembered; 0 for a rule that remembers nothing."""

    @property
    def kind(self) -> str:
        return self.rule.kind


@dataclass(frozen=True, slots=True)
class Recalled:
    """What was learned before for one upstream and model, by rule, and its input tokens per
    byte (token_ratios.py)."""

    keys: tuple[tuple[RefusalRule, frozenset[str]], ...] = ()
    tokens: TokenRatio | None = None

    def applied(self, rules: RouteRules) -> RouteRules:
        """The route's rules with what was learned: a new value, the route's own unchanged."""
        for rule, keys in self.keys:
            rules = rule.adjust(rules, keys)
        return rules

    @property
    def refused_part(self) -> RefusedPart | None:
        """A part this upstream refused before for the model, which the request carries: the
        request is answered at once (refused_parts.py)."""
        if not self.keys:
            return None
        return next((rule for rule, _ in self.keys if isinstance(rule, RefusedPart)), None)


NOTHING = Recalled()

R = TypeVar("R")
Dispatch = Callable[[httpx.Request], Awaitable[httpx.Response | R]]
"""Sends one request upstream: an upstream response, or whatever the caller makes of a
failure (the app's own error response), which is passed on as it is."""
Rebuild = Callable[[RouteRules], Awaitable[dict[str, Any]]]
"""The forwarded body built again from the client's request by the request phase, with these
rules (the app's: only it knows the repairs, and its answer side must know what went up)."""

ANSWERED = 200
"""The status remembered beside what an answer (not a refusal) taught."""

EVERY_RULE = RouteRules()
"""A route with every key "auto": every rule learns (what a caller without rules gets)."""


class RefusalLearning:
    def __init__(self, memory: RefusalMemory, rules: Sequence[RefusalRule] = RULES) -> None:
        self.memory = memory
        self.tokens = TokenRatios(memory)
        self.rules = tuple(rules)
        self._statuses = frozenset(status for rule in self.rules for status in rule.statuses)

    async def recall(
        self,
        identity: str,
        request: Mapping[str, Any],
        rules: RouteRules = EVERY_RULE,
        *,
        tokens: bool = False,
    ) -> Recalled:
        """What this upstream refused before for the request's model, among what the request
        carries and the route lets be learned, and, with `tokens` (a door that estimates input
        tokens), the model's input tokens per byte: one store lookup for every rule and the
        ratio, none when nothing is asked."""
        wanted = [(rule, rule.candidates(request)) for rule in self.rules if rule.learns(rules)]
        names = [name for _, candidates in wanted for name in candidates]
        if tokens:
            names.append(TOKENS_KEY)
        values = await self.memory.recall_values(identity, request.get("model"), names)
        if not values:
            return NOTHING
        ratio = TokenRatio.of(values.pop(TOKENS_KEY, None))
        found = {with_value(name, said) for name, said in values.items()}
        return Recalled(
            tuple(
                (rule, keys)
                for rule, candidates in wanted
                if (keys := frozenset(key for key in found if key_name(key) in candidates))
            ),
            ratio,
        )

    async def send(
        self,
        dispatch: Dispatch[R],
        identity: str,
        body: dict[str, Any],
        outgoing: httpx.Request,
        rules: RouteRules = EVERY_RULE,
        rebuild: Rebuild | None = None,
    ) -> tuple[httpx.Response | R, Learned | None]:
        """The answer to `outgoing` (whose content is `body`, sent with `rules`), sent once
        more at most: when the upstream refused it for something a rule the route learns
        reads, the request goes without it (`body` edited in place, or built again by
        `rebuild`) and that answer is the one returned, whatever it is. Any other answer, and a
        refusal whose rule changes nothing in the request, is returned as it came; so is the
        refusal of a part no repair stands in for (refused_parts.py), remembered, with what
        was learned."""
        response = await dispatch(outgoing)
        if not isinstance(response, httpx.Response) or response.status_code not in self._statuses:
            return response, None
        status = response.status_code
        learning = [rule for rule in self.rules if status in rule.statuses and rule.learns(rules)]
        if not learning:
            return response, None
        response, error = await read_refusal(response)
        if error is None:
            return response, None
        for rule in learning:
            keys = rule.detect(error, body)
            if keys:
                break
        else:
            return response, None
        if isinstance(rule, RefusedPart):  # nothing to send without it: the refusal stands
            self.memory.remember(identity, body.get("model"), keys, status)
            return response, Learned(rule, status, keys, self.memory.ttl_seconds)
        if rule.apply(body, keys):
            again = body
        elif rebuild is None:
            return response, None
        else:
            again = await rebuild(rule.adjust(rules, frozenset(keys)))
            if again == body:  # the rule's repair has nothing to change here: it stands
                return response, None
        await response.aclose()
        ttl_seconds = 0.0
        if rule.remembers:
            self.memory.remember(identity, body.get("model"), keys, status)
            ttl_seconds = self.memory.ttl_seconds
        learned = Learned(rule, status, keys, ttl_seconds)
        return await dispatch(resent(outgoing, json_codec.dumps(again))), learned

    def answered(
        self, identity: str, model: object, rules: RouteRules, repairs: Mapping[str, int]
    ) -> Learned | None:
        """After an exchange (sent with `rules`, counted `repairs`): what its answer showed
        that the route learns (answer_rules.py), remembered like a refusal; else None."""
        rule = TEMPLATE_OPENS_THINK
        if not (rule.shows(repairs) and rule.learns(rules)):
            return None
        keys = (rule.memory_key,)
        self.memory.remember(identity, model, keys, ANSWERED)
        return Learned(rule, ANSWERED, keys, self.memory.ttl_seconds)

    async def aclose(self) -> None:
        await self.memory.aclose()


def open_learning(settings: Settings, shared: Store) -> RefusalLearning:
    """Learned rules kept beside what the app's `shared` store keeps (on Redis, on its
    connection)."""
    return RefusalLearning(open_memory(settings, shared))
