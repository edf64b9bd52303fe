"""Explanations as text for a person (coloured on a terminal) or as JSON for tools."""

from __future__ import annotations

from collections import Counter
from typing import Any

from proxy.explain.attribution import BodyChange, Label
from proxy.explain.diff import MISSING, Change, change_json, field_changes
from proxy.explain.front import FrontView, front_value
from proxy.explain.front_shapes import shape_text
from proxy.explain.rows import Row
from proxy.explain.run import Explanation
from proxy.wire import json_codec
from proxy.wire.sse import SSEDecoder


def event_value(raw: bytes) -> Any:
    """An event as shown: its JSON data, `[DONE]`, or its text (comments, named events)."""
    decoder = SSEDecoder()
    events = decoder.feed(raw) + decoder.flush()
    if len(events) == 1 and events[0].data is not None and events[0].event is None:
        data = events[0].data
        try:
            return json_codec.loads(data)
        except json_codec.JSONDecodeError:
            return data
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def _row_changes(row: Row) -> list[Change]:
    """Field changes of an event that went out as one event; a drop, split or addition shows
    as its events instead."""
    if row.upstream is None or len(row.client) != 1 or row.client[0] == row.upstream:
        return []
    return field_changes(event_value(row.upstream), event_value(row.client[0]))


def _body_changes(body: BodyChange | None) -> list[Change]:
    return [] if body is None else field_changes(body.before, body.after)


def _body_json(body: BodyChange | None) -> dict[str, Any] | None:
    if body is None:
        return None
    return {
        "changes": [change_json(change) for change in _body_changes(body)],
        "labels": [label.to_json() for label in body.labels],
    }


def _row_json(item: Explanation, number: int) -> dict[str, Any]:
    row = item.rows[number]
    out = {
        "upstream": None if row.upstream is None else event_value(row.upstream),
        "client": [event_value(raw) for raw in row.client],
        "changes": [change_json(change) for change in _row_changes(row)],
        "labels": [label.to_json() for label in row.labels],
    }
    if item.front is not None:  # the front events this chat event became
        out["front"] = [front_value(raw) for raw in item.front.rows[number]]
    return out


def _front_json(front: FrontView | None) -> dict[str, Any] | None:
    if front is None:
        return None
    request = front.request
    return {
        "api": front.api,
        "streamed": front.streamed,
        "request": None
        if request is None
        else {
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "headers": request.headers,
            "body": request.body_json,
            "shape": front.front_shape,
        },
        "chat_request": {"shape": front.chat_shape},
        "labels": [label.to_json() for label in front.translation_labels],
        "recorded_translation": front.translation if front.request is not None else None,
        "start": [front_value(raw) for raw in front.start],
        "end": [front_value(raw) for raw in front.end],
        "answer": [front_value(raw) for raw in front.answer],
        "notes": [label.to_json() for label in front.events_labels],
        "matches_recorded": not front.diff if front.rendered else None,
        "diff": front.diff,
        "accounted": front.accounted,
    }


def to_json(explanations: list[Explanation]) -> dict[str, Any]:
    """The machine-readable document: per cassette its request and response changes, its
    events with upstream, client and labels, and its totals by kind."""
    cassettes = []
    totals: Counter[str] = Counter()
    for item in explanations:
        totals.update(item.totals)
        cassettes.append(
            {
                "name": item.name,
                "status": item.status,
                "mode": item.mode,
                "request": _body_json(item.request),
                "response": _body_json(item.response),
                "front": _front_json(item.front),
                "events": [_row_json(item, number) for number in range(len(item.rows))],
                "relayed": item.relayed.decode("utf-8", "replace") if item.relayed else None,
                "end": item.end or None,
                "end_detail": item.end_detail or None,
                "notes": [label.to_json() for label in item.notes],
                "totals": item.totals,
                "accounted": item.accounted,
            }
        )
    return {"cassettes": cassettes, "totals": dict(sorted(totals.items()))}


class Style:
    """ANSI colours, or none: the text is the same either way."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _json(value: Any) -> str:
    return json_codec.dumps(value).decode()


def _label_text(label: Label) -> str:
    kinds = ", ".join(kind if n == 1 else f"{kind} x{n}" for kind, n in label.kinds.items())
    if kinds and label.action:
        return f"[{label.repair}: {kinds} ({label.action})]"
    return f"[{label.repair}: {kinds or label.action or 'observed'}]"


def _labels_lines(labels: list[Label], style: Style) -> list[str]:
    """Each label, with the fields that repair changed under it."""
    lines = []
    for label in labels:
        lines.append("    " + style("33", _label_text(label)))
        lines += _changes_lines(label.changes, style)
    return lines


def _changes_lines(changes: list[Change], style: Style) -> list[str]:
    lines = []
    for path, before, after in changes:
        if before is MISSING:
            text = f"+ {style('36', path)}: {style('32', _json(after))}"
        elif after is MISSING:
            text = f"- {style('36', path)}: {style('31', _json(before))}"
        else:
            old, new = style("31", _json(before)), style("32", _json(after))
            text = f"~ {style('36', path)}: {old} → {new}"
        lines.append("      " + text)
    return lines


def _body_lines(title: str, body: BodyChange | None, style: Style) -> list[str]:
    if body is None:
        return []
    changes = _body_changes(body)
    if not changes and not body.labels:
        return [f"{title}: unchanged"]
    lines = [f"{title}:"]
    if title == "response":
        lines.append(f"  upstream  {style('31', _compact(body.before))}")
        lines.append(f"  client    {style('32', _compact(body.after))}")
    return lines + _labels_lines(body.labels, style)


def _row_lines(number: int, row: Row, style: Style) -> list[str]:
    unchanged = not row.labels and row.upstream is not None and row.client == [row.upstream]
    if unchanged:
        return [style("2", f"#{number:<3} = {_compact(event_value(row.client[0]))}")]
    lines = [f"#{number}"]
    if row.upstream is None:
        lines.append(f"  upstream  {style('2', '(none: added by the proxy)')}")
    else:
        lines.append(f"  upstream  {style('31', _compact(event_value(row.upstream)))}")
    if not row.client:
        lines.append(f"  client    {style('2', '(nothing sent for it)')}")
    for index, raw in enumerate(row.client):
        name = "client" if len(row.client) == 1 else f"client {index + 1}"
        lines.append(f"  {name:<9} {style('32', _compact(event_value(raw)))}")
    return lines + _labels_lines(row.labels, style)


def _front_lines(title: str, events: list[bytes], style: Style) -> list[str]:
    """Front events under a chat row (`front`, `front 2`…), or a section of their own."""
    lines = [title] if title and events else []
    for index, raw in enumerate(events):
        name = "front" if len(events) == 1 else f"front {index + 1}"
        lines.append(f"  {name:<9} {style('35', _compact(front_value(raw)))}")
    return lines


def _front_request_lines(front: FrontView, style: Style) -> list[str]:
    how = "streamed to the client" if front.streamed else "one body to the client"
    request = front.request
    if request is None:
        head = f"front request ({front.api}, {how}): not recorded (the cassette predates it)"
        lines = [head]
    else:
        lines = [f"front request ({front.api}, {request.method} {request.path}, {how}):"]
        lines.append(f"  client    {shape_text(front.front_shape)}")
    lines.append(f"  chat      {shape_text(front.chat_shape)}")
    labels = front.translation_labels + front.recorded_labels
    return lines + _labels_lines(labels, style)


_ASIDE = "heartbeats and per-answer ids aside"


def _front_verdict(front: FrontView, style: Style) -> list[str]:
    lines = _labels_lines(front.events_labels, style)
    if not front.rendered:
        return [
            *lines,
            "front: not replayed: the cassette was recorded before the client's request was "
            "kept, and its door needs it",
        ]
    if not front.accounted:
        lines.append(style("31", "note: these front events do not add up to today's answer"))
    if not front.diff:
        return [*lines, f"front: today's answer is what the client was sent ({_ASIDE})"]
    lines.append(
        style("31", f"front: what the client was sent differs from today's answer ({_ASIDE}):")
    )
    return lines + [f"    {line}" for line in front.diff]


def to_text(item: Explanation, style: Style) -> str:
    lines = [style("1", f"== {item.name} ({item.mode}, {item.status})")]
    front = item.front
    if front is not None:
        lines += _front_request_lines(front, style)
    lines += _body_lines("request", item.request, style)
    lines += _body_lines("response", item.response, style)
    said = item.relayed.decode("utf-8", "replace").strip()
    if item.mode == "relayed":
        lines.append(f"relayed as received: {said}")
    elif item.mode == "refused":
        lines.append(f"refused, in the door's own error shape: {said}")
    if front is not None:
        lines += _front_lines("front answer", front.answer, style)
        lines += _front_lines("front start", front.start, style)
    for number, row in enumerate(item.rows, 1):
        lines += _row_lines(number, row, style)
        if front is not None:
            lines += _front_lines("", front.rows[number - 1], style)
    if front is not None:
        lines += _front_lines("front end", front.end, style)
    if item.end:
        detail = f" ({item.end_detail})" if item.end_detail else ""
        lines.append(f"end: {item.end}{detail}")
    if item.notes:
        lines.append("not tied to one event:")
        lines += _labels_lines(item.notes, style)
    if not item.accounted:
        lines.append(style("31", "note: these events do not add up to what the client was sent"))
    if front is not None:
        lines += _front_verdict(front, style)
    totals = ", ".join(f"{kind}={n}" for kind, n in item.totals.items())
    lines.append(f"totals: {totals or 'no repairs'}")
    return "\n".join(lines)
