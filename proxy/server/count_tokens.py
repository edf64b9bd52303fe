"""`POST /v1/messages/count_tokens`: Anthropic's token count, for a chat upstream that has none."""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.fronts.messages.request import MessagesError, translate
from proxy.routing.routes import Router
from proxy.server.doors.messages import MESSAGES
from proxy.server.exchanges import Exchanges, plain_record, request_id_of
from proxy.wire import json_codec


async def count_tokens(exchanges: Exchanges, router: Router, request: Request) -> Response:
    """An estimate, said to be one: chat-completions upstreams have no counting endpoint, so
    the answer is the UTF-8 size of the chat request this body becomes, divided by four (the
    rule of thumb for English text and JSON with BPE tokenizers), rounded up. The
    `x-streamfix-token-count: estimate` header says so; Claude Code's Read tool uses the number
    to judge whether a file fits, for which an estimate serves."""
    request_id = request_id_of(request)
    raw = await exchanges.admitted_body(request, request_id)
    if isinstance(raw, Response):
        return MESSAGES.restyled(raw)
    try:
        given = json_codec.loads(raw)
        if isinstance(given, dict):
            given = {"max_tokens": 1, **given}  # count_tokens takes no max_tokens
        chat = translate(given, request.headers).body
    except (json_codec.JSONDecodeError, MessagesError) as exc:
        error = exc if isinstance(exc, MessagesError) else MessagesError(f"invalid JSON: {exc}")
        record = plain_record(request, request_id, "-", None)
        return exchanges.failed(record, JSONResponse(error.body, status_code=error.status))
    size = len(json_codec.dumps([chat["messages"], chat.get("tools", [])]))
    response = JSONResponse({"input_tokens": math.ceil(size / 4)})
    response.headers["x-streamfix-token-count"] = "estimate"
    # Booked under the route the model names, as Claude Code's main requests are.
    route = router.route_for(chat.get("model"))
    record = plain_record(request, request_id, route.name, chat.get("model"))
    return exchanges.failed(record, response)  # booked and headed like any exchange
