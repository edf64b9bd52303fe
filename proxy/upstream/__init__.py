"""The upstream side: which route a request takes, the headers that cross, and the transports
that carry it (live HTTP/1.1 or httpx, recording, replaying: only the transport differs)."""
