"""A stand-in for `curl` on machines without it (a slim container), so the README's snippets run
in tests everywhere: the flags those snippets use and nothing else. `-s` (quiet), `-f` (exit
22 on a status of 400 or more), `-N` (no buffering: the body is written as it comes), `-D -`
(the head first), `-H NAME: VALUE`, `-d DATA` or `-d @FILE` (a POST). A refused connection
exits 7, as curl does.

tests/test_readme.py puts it on the PATH as `curl` only when there is no real one.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path


def main(argv: list[str]) -> int:
    headers: dict[str, str] = {}
    data: bytes | None = None
    fail = show_head = False
    url = ""
    words = iter(argv)
    for word in words:
        if word == "-H":
            name, _, value = next(words).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            text = next(words)
            data = Path(text[1:]).read_bytes() if text.startswith("@") else text.encode()
        elif word == "-D":
            show_head = next(words) == "-"
        elif word.startswith("-"):
            fail = fail or "f" in word
        else:
            url = word
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as error:
        if fail:
            return 22
        response = error
    except (urllib.error.URLError, ConnectionError):
        return 7
    out = sys.stdout.buffer
    if show_head:
        out.write(f"HTTP/1.1 {response.status}\r\n{response.headers}".encode())
    while piece := response.read1(65536) if hasattr(response, "read1") else response.read():
        out.write(piece)
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
