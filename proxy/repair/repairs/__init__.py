"""The repairs, and the one place that states their order: the request repairs' (phase one)
and the stream links' (phase two)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.repair.forwarded import Forwarded
from proxy.repair.markup.families import FAMILIES
from proxy.repair.pipeline import Link
from proxy.repair.repairs.cache_control import CacheControlDropped
from proxy.repair.repairs.call_ids import ReusedCallIdRepair
from proxy.repair.repairs.content_parts import ContentPartsRepair
from proxy.repair.repairs.finish_reason import FinishReasonRepair
from proxy.repair.repairs.forced_tool_choice import ForcedToolChoiceRepair
from proxy.repair.repairs.history import HistoryRepair
from proxy.repair.repairs.max_tokens import MaxTokensClamped
from proxy.repair.repairs.message_shapes import MessageShapeRepair
from proxy.repair.repairs.parameters import ParameterRepair
from proxy.repair.repairs.receipt_capture import ReceiptCapture
from proxy.repair.repairs.receipts import (
    CurrentTurnPlaceholders,
    ForeignMetadataStripped,
    MissingReceiptsCounted,
    ReceiptLookup,
    ReceiptsRestored,
)
from proxy.repair.repairs.response_format import ResponseFormatDowngraded
from proxy.repair.repairs.role import SingleRoleRepair
from proxy.repair.repairs.text_reasoning import TextReasoningRepair
from proxy.repair.repairs.text_tool_calls import TextToolCallRepair
from proxy.repair.repairs.tool_calls import ToolCallRepair
from proxy.repair.repairs.tool_names import ToolNamesRenamed, ToolNamesRestored
from proxy.repair.repairs.tool_schemas import ToolSchemaRepair
from proxy.repair.request_phase import RequestRepair
from proxy.repair.tally import Tally
from proxy.store.protocol import Store


@dataclass(frozen=True, slots=True)
class ChainOptions:
    """What the repairs' construction reads of the configuration, process-wide (the per-route
    rules are the request phase's `rules`). Built once from the settings by the server
    (`proxy.settings.chain.chain_options`): the repairs never read the settings."""

    enabled: bool
    """`[repairs] enabled`: false leaves the chain empty (everything relayed as it came)."""
    strict: bool
    """`[repairs] strict`: a failing repair re-raises instead of passing the chunk unrepaired."""
    history_repair: bool
    """`[history] repair`."""
    emit: str
    """`[tool_calls] emit`: "auto", "atomic" or "incremental"."""
    max_buffered_bytes: int
    """`[tool_calls] max_buffered_bytes`."""
    placeholder_on_miss: bool
    """`[receipts] on_missing = "placeholder"`."""
    receipt_max_value_bytes: int
    """`[receipts] max_value_bytes`."""


def request_repairs(options: ChainOptions, store: Store) -> list[RequestRepair]:
    """The request repairs of phase one, built once per process (they keep nothing between
    exchanges), in this order:

    1. HistoryRepair heals the history before anything reads its ids.
    2. ToolSchemaRepair rewrites the tools' schemas for the upstream's dialect, reading nothing
       another repair writes; ParameterRepair drops or renames top-level parameters the
       upstream rejects, which no other repair reads or adds; ToolNamesRenamed renames the
       tool names the upstream rejects (it reads nothing another repair writes) and leaves the
       way back to the client's names for the stream; ResponseFormatDowngraded sends a
       `json_schema` response format as JSON mode with the schema in the leading system
       message, after ParameterRepair (a format the upstream takes in no form is dropped
       there, and then there is nothing to downgrade); MaxTokensClamped sends a completion
       budget over the upstream's limit as the limit, after ParameterRepair (Mistral's
       `max_completion_tokens` renamed first, and both names are clamped alike);
       ForcedToolChoiceRepair unforces a forced tool choice, or leaves out the thinking
       parameters beside it, after ParameterRepair (a thinking parameter the upstream refused
       is gone by then) and before ToolNamesRenamed (which renames a named choice left).
       there, and then there is nothing to downgrade); CacheControlDropped takes off the
       prompt-cache marks (or their `ttl`) an upstream refuses, after ResponseFormatDowngraded,
       whose instruction joins a marked system message as one more part and so becomes part
       of the one string the marks' removal makes of it.
    3. The receipt repairs (receipts.py says each one's job), in their own order: ReceiptLookup
       (the one store read), ForeignMetadataStripped, ReceiptsRestored,
       CurrentTurnPlaceholders, MissingReceiptsCounted. They read the history by the client's
       call ids, after HistoryRepair made them unique.
    4. MessageShapeRepair last: HistoryRepair and the receipt repairs read the history by the
       client's call ids, so those are mapped for Mistral only once nothing else will look
       them up, and the messages are reshaped for the upstream once they hold everything that
       goes up (the schema instruction too: a developer message it joined becomes system).
    """
    if not options.enabled:
        return []
    history: list[RequestRepair] = [HistoryRepair()] if options.history_repair else []
    placeholders: list[RequestRepair] = (
        [CurrentTurnPlaceholders()] if options.placeholder_on_miss else []
    )
    return [
        *history,
        ToolSchemaRepair(),
        ParameterRepair(),
        ResponseFormatDowngraded(),
        MaxTokensClamped(),
        ForcedToolChoiceRepair(),
        CacheControlDropped(),
        ToolNamesRenamed(),
        ReceiptLookup(store),
        ForeignMetadataStripped(),
        ReceiptsRestored(),
        *placeholders,
        MissingReceiptsCounted(),
        MessageShapeRepair(),
    ]


def stream_links(
    options: ChainOptions, forwarded: Forwarded, tally: Tally, store: Store
) -> list[Link]:
    """One exchange's stream links, built from what its request phase decided: a link with
    nothing to do for this exchange is left out. In this order:

    1. TextReasoningRepair moves reasoning written as content into the reasoning field first,
       so a tool-call tag the model wrote while thinking never reaches the recogniser as
       content and cannot become a call; harmony's commentary channel (gpt-oss's calls) is
       left in the content, framing included, for the recogniser.
    2. TextToolCallRepair turns tool-call markup written as content into `tool_calls` entries,
       before ToolCallRepair, which then delivers them like the upstream's own.
    2a. ContentPartsRepair makes content sent as an array of blocks a string after the markup
       links, which read only string content (what Magistral writes as blocks is never taken
       for markup), and before ToolCallRepair, which sends a chunk's text as received.
    3. ToolCallRepair turns whatever the upstream sent into whole calls, which is what every
       later link reasons about; the fixes it applies to each whole call before sending it
       (mended and decoded arguments, an inferred name, a minted id) are in call_fixes.py, in
       their order.
    3a. ToolNamesRestored gives the answer's calls the client's names back right after
       ToolCallRepair: every call is whole and named by then, the upstream's own, a name
       ToolCallRepair inferred and a call TextToolCallRepair recognised, all of them named as
       the upstream was sent the tools (the Forwarded they read), so every one is mapped back.
    4. ReusedCallIdRepair sees each call's id once it is final, and before anyone keeps it.
    5. FinishReasonRepair must see the calls that ToolCallRepair emits (even the ones it only
       emits at stream end) to know that "stop" means "tool_calls".
    6. SingleRoleRepair after every link that emits, drops or reorders chunks: the role goes
       on the first delta as the client receives it (ToolCallRepair may send a call before the
       chunk that carried the role).
    7. ReceiptCapture last: it keys receipts by the call ids exactly as the client receives
       them, so it watches the final output, and its store write happens at the very end.

    After them `Phases.stream` adds the answer watch (answer_watch.py), which only reads what
    the client gets, for the span and the token metrics.
    """
    if not options.enabled:
        return []
    rules = forwarded.rules
    links: list[Link] = []
    if rules.markup.text_reasoning:
        links.append(TextReasoningRepair(rules.markup, tally))
    tools = forwarded.declared_tools if rules.markup.text_tool_calls and FAMILIES else None
    if tools is not None:
        links.append(
            TextToolCallRepair(
                forwarded, tally, tools, FAMILIES, max_span_chars=options.max_buffered_bytes
            )
        )
    links.append(ContentPartsRepair(tally))
    links.append(
        ToolCallRepair(
            forwarded, tally, emit=options.emit, max_buffered_bytes=options.max_buffered_bytes
        )
    )
    if forwarded.tool_names_back:
        links.append(ToolNamesRestored(forwarded.tool_names_back, tally))
    links += [ReusedCallIdRepair(forwarded, tally), FinishReasonRepair(tally)]
    links.append(SingleRoleRepair(tally))
    if rules.profile.keeps_receipts and forwarded.scope.keeps_receipts:
        links.append(
            ReceiptCapture(forwarded, tally, store, max_value_bytes=options.receipt_max_value_bytes)
        )
    return links
