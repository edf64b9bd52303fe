"""What a front's answer mints afresh each time (its ids, its `created_at`, the receipt token
naming its turn), set aside when `streamfix replay` and `streamfix explain` compare today's
answer with a recorded one: each of today's values is read as the recorded value in its place,
key by key, in the order the values first appear. What is not minted stays as it is, so a
repair that changed an answer still shows as a difference."""

from __future__ import annotations

import re
from functools import cache

_SCALAR = rb'"(?:[^"\\]|\\.)*"|-?[0-9]+'


@cache
def _field(key: str) -> re.Pattern[bytes]:
    return re.compile(b'"' + re.escape(key.encode()) + b'":(' + _SCALAR + b")")


def values(body: bytes, key: str) -> list[bytes]:
    """The distinct JSON values (as encoded) of every `key` field in `body`, in order."""
    seen: dict[bytes, None] = {}
    for match in _field(key).finditer(body):
        seen.setdefault(match.group(1), None)
    return list(seen)


class AsRecorded:
    """Today's bytes with the values they minted replaced by the recorded answer's, paired by
    key and position. A string is replaced wherever it stands (an item id is also the
    `item_id` of its events); a number only as the value of its key."""

    def __init__(self, recorded: bytes, today: bytes, keys: tuple[str, ...]) -> None:
        self._to: dict[bytes, bytes] = {}
        patterns: list[bytes] = []
        for key in keys:
            pairs = zip(values(today, key), values(recorded, key), strict=False)
            for now, then in pairs:
                if now == then or now in self._to:
                    continue
                if now.startswith(b'"'):
                    self._to[now] = then
                    patterns.append(re.escape(now))
                else:  # a number: only in its own field, and never a prefix of another
                    field = b'"' + key.encode() + b'":'
                    self._to[field + now] = field + then
                    patterns.append(re.escape(field + now) + rb"(?![0-9])")
        # One pass, longest first: a value replaced is never read again as another.
        patterns.sort(key=len, reverse=True)
        self._pattern = re.compile(b"|".join(patterns)) if patterns else None

    def __call__(self, data: bytes) -> bytes:
        if self._pattern is None:
            return data
        return self._pattern.sub(lambda match: self._to[match.group(0)], data)
