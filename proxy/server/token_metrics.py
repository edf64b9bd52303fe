"""Token usage as Prometheus metrics, from what the upstream reported in `usage` (never
estimated: an answer without usage counts no tokens), so that every replica's counts add up in
the operator's own dashboards.

- `streamfix_tokens_total{route, model, type}`: tokens by route, model and type (`input`,
  `output`); the model is the one the answer names (`gen_ai.response.model`), else the one the
  request named.
- `gen_ai_client_token_usage{gen_ai_operation_name, gen_ai_provider_name, gen_ai_request_model,
  gen_ai_response_model, gen_ai_token_type, route}`: OpenTelemetry's `gen_ai.client.token.usage`
  histogram (tokens per exchange) in the form its Prometheus exporters give it, with the
  buckets its conventions name, so dashboards built for it read the proxy's too.

Model names come from clients and upstream answers, so they are bounded: each route keeps at most
MAX_MODELS_PER_ROUTE distinct (request model, response model) pairs; an exchange past that is
counted under the model `other`, and in `streamfix_token_models_folded_total{route}`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.repair.answer_facts import AnswerFacts

MAX_MODELS_PER_ROUTE = 100
OTHER = "other"
OPERATION = "chat"
"""`gen_ai.operation.name`: every door's upstream call is a chat completion."""
# OpenTelemetry's bucket boundaries for gen_ai.client.token.usage (GenAI metrics conventions).
TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)

_Children = tuple[Counter, Histogram]
"""One label set's counter and histogram, for one token type."""


class TokenMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = Counter(
            "streamfix_tokens",
            "Tokens the upstream reported in usage, by route, model and type (input, output)",
            ["route", "model", "type"],
            registry=registry,
        )
        self.usage = Histogram(
            "gen_ai_client_token_usage",
            "Tokens per exchange the upstream reported (OpenTelemetry gen_ai.client.token.usage)",
            [
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "gen_ai_response_model",
                "gen_ai_token_type",
                "route",
            ],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.folded = Counter(
            "streamfix_token_models_folded",
            f"Exchanges whose tokens were counted under model {OTHER!r}: their route had "
            f"{MAX_MODELS_PER_ROUTE} model pairs already",
            ["route"],
            registry=registry,
        )
        self._pairs: dict[str, set[tuple[str, str]]] = {}
        """Per route, the (request model, response model) pairs it has label sets for."""
        self._children: dict[tuple[str, str, str, str], _Children] = {}
        """By route, request model, response model and token type: looked up once each."""

    def count(self, route: str, provider: str, requested: object, answer: AnswerFacts) -> None:
        """One exchange's reported usage."""
        request_model = requested if isinstance(requested, str) else ""
        response_model = answer.model or ""
        pairs = self._pairs.setdefault(route, set())
        pair = (request_model, response_model)
        if pair not in pairs:
            if len(pairs) >= MAX_MODELS_PER_ROUTE:
                self.folded.labels(route).inc()
                pair = (OTHER, OTHER)
            else:
                pairs.add(pair)
        for kind, tokens in (("input", answer.input_tokens), ("output", answer.output_tokens)):
            if tokens is None:
                continue  # not reported: no sample, rather than a zero nobody measured
            key = (route, *pair, kind)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = self._labelled(key, provider)
            counter, histogram = children
            counter.inc(tokens)
            histogram.observe(tokens)

    def _labelled(self, key: tuple[str, str, str, str], provider: str) -> _Children:
        route, request_model, response_model, kind = key
        model = response_model or request_model
        labels = (OPERATION, provider, request_model, response_model, kind, route)
        return self.tokens.labels(route, model, kind), self.usage.labels(*labels)
