"""The repair chain's options from the settings: the one place that reads them for it, so the
repairs (`proxy/repair/`) never import the settings that sit above them."""

from __future__ import annotations

from proxy.repair.repairs import ChainOptions
from proxy.settings.schema import Settings


def chain_options(settings: Settings) -> ChainOptions:
    return ChainOptions(
        enabled=settings.repairs.enabled,
        strict=settings.repairs.strict,
        history_repair=settings.history.repair,
        emit=settings.tool_calls.emit,
        max_buffered_bytes=settings.tool_calls.max_buffered_bytes,
        placeholder_on_miss=settings.receipts.on_missing == "placeholder",
        receipt_max_value_bytes=settings.receipts.max_value_bytes,
    )
