"""The first refusal rule (proxy/learning/refusals.py): a request parameter the upstream
rejected, dropped for the one resend, and remembered for that upstream and model.

OpenAI-compatible upstreams refuse a whole request over one top-level parameter they do not
take, before generating anything (so nothing is billed), with a 400 or a 422 whose body names
it. The profiles' tables (proxy/repair/profiles.py) hold what is known; this is for the rest:
when the error names a parameter the request carries, and that is not what the request is
(`PROTECTED`), the request goes once more without it, and the (upstream, model, parameter)
is remembered, so later requests go without it at once: what was learned joins the profile's
`parameters` table as one more drop, which ParameterRepair applies like the others. Nothing
else is retried: any other status, an error that names nothing the request has, or a second
rejection reach the client as they came.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import httpx

from proxy.learning.refusal_memory import RefusalMemory
from proxy.learning.refusal_reading import MAX_ERROR_BYTES, read_refusal
from proxy.repair.profiles import ParameterRule
from proxy.repair.repairs.parameters import PROTECTED
from proxy.repair.rules import RouteRules

__all__ = [
    "LEARNED_KIND",
    "MAX_ERROR_BYTES",
    "PARAMETERS",
    "REJECTED_STATUSES",
    "ParameterMemory",
    "RejectedParameters",
    "named_parameters",
    "read_rejection",
    "rejected_parameters",
]

REJECTED_STATUSES = frozenset({400, 422})
"""Validation errors, answered before generation. Never 429 or 5xx: those may have run."""
LEARNED_KIND = "parameter_learned"

_NAME = r"([A-Za-z_][A-Za-z0-9_]*)"
# How upstreams name the parameter they refuse, each from a real error body (backslashes are
# removed first, so a name inside an error JSON-encoded twice reads the same):
_PHRASES = [
    # OpenAI and Azure: "Unrecognized request argument supplied: system_prompt"
    # (BerriAI/litellm#10791).
    re.compile(r"Unrecognized request argument supplied: " + _NAME),
    # OpenAI: "Unknown parameter: 'stream_options'." (QuantumNous/new-api#418) and
    # "Unsupported parameter: 'parallel_tool_calls' is not supported with this model."
    # (evalstate/fast-agent#279).
    re.compile(r"(?:Unknown|Unsupported) parameter: '" + _NAME + "'"),
    # Groq: "property 'store' is unsupported, did you mean 'stop'?" (fanenr/chatbot#21).
    re.compile(r"property '" + _NAME + "' is unsupported"),
    # DeepSeek: "deepseek-reasoner does not support the parameter `presence_penalty`"
    # (lobehub/lobehub#5523).
    re.compile(r"does not support the parameter `" + _NAME + "`"),
    # Cerebras: "parallel_tool_calls=False is not supported by this model."
    # (agno-agi/agno#4508); Groq: "`logprobs` is not supported with this model"
    # (groq/groq-python#25).
    re.compile(r"(?<![\w.])[`'\"]?" + _NAME + r"(?:=\S+)?[`'\"]? (?:is|are) not supported"),
]
# Gemini: 'Invalid JSON payload received. Unknown name "store": Cannot find field.'
# (Routstr/routstr-core#505). With " at 'tools[0]…'" the name is inside the request (a schema
# keyword, proxy/repair/dialects/), not a parameter; at its own name (`at 'extra_body'`) it is.
_GEMINI = re.compile(r"Unknown name \"" + _NAME + r"\"(?: at '([^']*)')?: Cannot find field")
# Mistral (pydantic): {"type":"extra_forbidden","loc":["body","max_completion_tokens"],
# "msg":"Extra inputs are not permitted"} (editor-code-assistant/eca#231,
# mistralai/platform-docs-public#7); a longer loc is inside the messages, not a parameter.
_EXTRA = re.compile(r"\"loc\"\s*:\s*\[\s*\"body\"\s*,\s*\"" + _NAME + r"\"\s*\]")
_EXTRA_SAID = ("extra_forbidden", "Extra inputs are not permitted")
# xAI: "Argument not supported on this model: frequencyPenalty" (BerriAI/litellm#14056), the
# name in camelCase.
_XAI = re.compile(r"Argument not supported(?: on this model)?: " + _NAME)


def named_parameters(error: str) -> set[str]:
    """Every parameter name the error body says was refused."""
    text = error.replace("\\", "")
    names = {match.group(1) for phrase in _PHRASES for match in phrase.finditer(text)}
    names |= {m.group(1) for m in _GEMINI.finditer(text) if m.group(2) in (None, m.group(1))}
    if any(said in text for said in _EXTRA_SAID):
        names |= {match.group(1) for match in _EXTRA.finditer(text)}
    for match in _XAI.finditer(text):
        names |= {match.group(1), re.sub(r"(?<!^)([A-Z])", r"_\1", match.group(1)).lower()}
    return names


def rejected_parameters(error: str, request: Mapping[str, Any]) -> list[str]:
    """The top-level parameters to drop for one more try, or [] for none: the error must name
    at least one the request sent, and none of what the request is (dropping `messages` or
    `tools` would answer another question)."""
    named = {name for name in named_parameters(error) if name in request}
    if named & PROTECTED:
        return []
    return sorted(named)


class RejectedParameters:
    """The parameters rule: the `RefusalRule` whose memory keys are top-level parameter names."""

    kind = LEARNED_KIND
    statuses = REJECTED_STATUSES
    remembers = True
    done = "naming %s; sent once more without it, and dropped up front for this upstream and model"

    def detect(self, error: str, request: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(rejected_parameters(error, request))

    def learns(self, rules: RouteRules) -> bool:
        return rules.learn_rejected_parameters

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        for name in keys:
            body.pop(name, None)
        return True

    def candidates(self, request: Mapping[str, Any]) -> list[str]:
        return [name for name in request if name not in PROTECTED]

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        """Each learned parameter as one more drop at the end of the profile's table: the table
        renames or drops first, and whatever learned name is still there goes."""
        learned = tuple(ParameterRule(name) for name in sorted(keys))
        profile = rules.profile
        return replace(rules, profile=replace(profile, parameters=(*profile.parameters, *learned)))


PARAMETERS = RejectedParameters()


class ParameterMemory(RefusalMemory):
    """The memory as the parameters rule reads it: by the names a request carries."""

    async def recall(self, identity: str, body: Mapping[str, Any]) -> frozenset[str]:
        """What of this request's parameters its upstream rejected before."""
        names = PARAMETERS.candidates(body)
        return frozenset(await self.recall_keys(identity, body.get("model"), names))


async def read_rejection(
    upstream: httpx.Response, request: Mapping[str, Any]
) -> tuple[httpx.Response, list[str]]:
    """The parameters a 400/422 `upstream` names, and a response that still gives the client
    every byte of it should it go out after all."""
    if upstream.status_code not in REJECTED_STATUSES:
        return upstream, []
    replay, text = await read_refusal(upstream)
    return replay, [] if text is None else rejected_parameters(text, request)
