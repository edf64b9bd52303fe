"""The repairs, and the one place that states their order."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.repair.exchange import Exchange
from proxy.repair.markup.families import FAMILIES
from proxy.repair.pipeline import Repair
from proxy.repair.receipts.store import ReceiptStore
from proxy.repair.repairs.call_ids import ReusedCallIdRepair
from proxy.repair.repairs.finish_reason import FinishReasonRepair
from proxy.repair.repairs.history import HistoryRepair
from proxy.repair.repairs.message_shapes import MessageShapeRepair
from proxy.repair.repairs.parameters import ParameterRepair
from proxy.repair.repairs.receipts import ReceiptRepair
from proxy.repair.repairs.role import SingleRoleRepair
from proxy.repair.repairs.text_reasoning import TextReasoningRepair
from proxy.repair.repairs.text_tool_calls import TextToolCallRepair
from proxy.repair.repairs.tool_calls import ToolCallRepair
from proxy.repair.repairs.tool_names import ToolNameRepair
from proxy.repair.repairs.tool_schemas import ToolSchemaRepair


@dataclass(frozen=True, slots=True)
class ChainOptions:
    """What the chain's construction reads of the configuration, process-wide (the per-route
    rules are the exchange's `rules`). Built once from the settings by the server
    (`proxy.settings.chain.chain_options`): the repairs never read the settings."""

    enabled: bool
    """`[repairs] enabled`: false leaves the chain empty (everything relayed as it came)."""
    strict: bool
    """`[repairs] strict`: a failing repair re-raises instead of passing the chunk unrepaired."""
    history_repair: bool
    """`[history] repair`."""
    emit: str
    """`[tool_calls] emit`: "atomic" or "incremental"."""
    max_buffered_bytes: int
    """`[tool_calls] max_buffered_bytes`."""
    placeholder_on_miss: bool
    """`[receipts] on_missing = "placeholder"`."""
    receipt_max_value_bytes: int
    """`[receipts] max_value_bytes`."""


def default_repairs(options: ChainOptions, exchange: Exchange, store: ReceiptStore) -> list[Repair]:
    """A fresh chain for one exchange, in this order:

    0. HistoryRepair (request side only) heals the history before anything reads its ids;
       ToolSchemaRepair (request side only) rewrites the tools' schemas for the upstream's
       dialect, reading nothing another repair writes; ParameterRepair (request side only)
       drops or renames top-level parameters the upstream rejects, which no other repair reads
       or adds.
    1. TextReasoningRepair moves reasoning written as content into the reasoning field first,
       so a tool-call tag the model wrote while thinking never reaches the recogniser as
       content and cannot become a call; harmony's commentary channel (gpt-oss's calls) is
       left in the content, framing included, for the recogniser.
    2. TextToolCallRepair turns tool-call markup written as content into `tool_calls` entries,
       before ToolCallRepair, which then delivers them like the upstream's own.
    3. ToolCallRepair turns whatever the upstream sent into whole calls, which is what every
       later repair reasons about.
    3a. ToolNameRepair renames, on the request, the tool names the upstream rejects (its
       request side reads nothing another repair writes), and gives the answer's calls the
       client's names back right after ToolCallRepair: every call is whole and named by then,
       the upstream's own, a name ToolCallRepair inferred and a call TextToolCallRepair
       recognised, all of them named as the upstream was sent the tools (the request they read
       is the one forwarded), so every one of them is mapped back.
    4. ReusedCallIdRepair sees each call's id once it is final, and before anyone keeps it.
    5. FinishReasonRepair must see the calls that ToolCallRepair emits (even the ones it only
       emits at stream end) to know that "stop" means "tool_calls".
    6. SingleRoleRepair after every repair that emits, drops or reorders chunks: the role goes
       on the first delta as the client receives it (ToolCallRepair may send a call before the
       chunk that carried the role).
    7. ReceiptRepair last: it keys receipts by the call ids exactly as the client receives
       them, so it watches the final output, and its store write happens at the very end.
    8. MessageShapeRepair (request side only) after every request-side repair: HistoryRepair
       and ReceiptRepair read the history by the client's call ids, so those are mapped for
       Mistral only once nothing else will look them up, and the messages are reshaped for
       the upstream once they hold everything that goes up.
    """
    if not options.enabled:
        return []
    history: list[Repair] = [HistoryRepair(exchange)] if options.history_repair else []
    return [
        *history,
        ToolSchemaRepair(exchange),
        ParameterRepair(exchange),
        TextReasoningRepair(exchange),
        TextToolCallRepair(exchange, FAMILIES, max_span_chars=options.max_buffered_bytes),
        ToolCallRepair(
            exchange,
            emit=options.emit,
            max_buffered_bytes=options.max_buffered_bytes,
        ),
        ToolNameRepair(exchange),
        ReusedCallIdRepair(exchange),
        FinishReasonRepair(exchange),
        SingleRoleRepair(exchange),
        ReceiptRepair(
            exchange,
            store,
            placeholder_on_miss=options.placeholder_on_miss,
            max_value_bytes=options.receipt_max_value_bytes,
        ),
        MessageShapeRepair(exchange),
    ]
