"""The upstream side: the headers that cross and the transports that carry a request (live
HTTP/1.1 or httpx, recording, replaying: only the transport differs). Which route it takes is
proxy/routing/'s; what an upstream's refusals and answers teach, proxy/learning/'s."""
