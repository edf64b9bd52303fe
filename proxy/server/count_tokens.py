"""`POST /v1/messages/count_tokens`: Anthropic's token count, for a chat upstream that has none."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.fronts.messages.request import MessagesError, translate
from proxy.learning.token_ratios import GUESSED
from proxy.routing.routes import Router
from proxy.server.doors.messages import MESSAGES
from proxy.server.exchanges import Exchanges, plain_record, request_id_of
from proxy.wire import json_codec


async def count_tokens(exchanges: Exchanges, router: Router, request: Request) -> Response:
    """A count made by the proxy, said to be one: chat-completions upstreams have no counting
    endpoint, so the answer is the size of the chat request this body becomes (the compact
    JSON the proxy would send) times the tokens per byte that upstream and model's answers
    reported (learning/token_ratios.py), rounded up. Before any answer taught it, a token per
    four bytes. `x-streamfix-token-count` says which (`estimate`, or `learned` with the ratio
    and how many answers it comes from). Claude Code's Read tool uses the number to judge
    whether a file fits."""
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
    # Booked under the route the model names, as Claude Code's main requests are, and
    # measured as that route sends it: under the upstream's model name.
    route = router.route_for(chat.get("model"))
    if route.upstream.model:
        chat["model"] = route.upstream.model
    ratio = await exchanges.refusals.tokens.recall(route.identity, chat.get("model")) or GUESSED
    response = JSONResponse({"input_tokens": ratio.estimate(len(json_codec.dumps(chat)))})
    response.headers["x-streamfix-token-count"] = ratio.said()
    record = plain_record(request, request_id, route.name, chat.get("model"))
    return exchanges.failed(record, response)  # booked and headed like any exchange
