"""`GET /v1/models` as Codex CLI asks for it (`?client_version=...`): its model catalog for the
routes' models, answered by the proxy (proxy/fronts/responses/codex_catalog.py). Any other
`GET /v1/models` is the upstream's, passed through."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.fronts.responses.codex_catalog import CLIENT_VERSION, codex_catalog
from proxy.routing.routes import Router
from proxy.server.exchanges import Exchanges, plain_record, request_id_of


def asks_for_codex_catalog(request: Request) -> bool:
    return CLIENT_VERSION in request.query_params


async def codex_models(exchanges: Exchanges, router: Router, request: Request) -> Response:
    """The catalog, behind the same admission as every request (the proxy's keys), booked and
    logged like one; nothing goes upstream."""
    request_id = request_id_of(request)
    refused = await exchanges.admitted_body(request, request_id)
    if isinstance(refused, Response):
        return refused
    patterns = [pattern for route in router.routes for pattern in route.patterns]
    record = plain_record(request, request_id, "-", None)
    return exchanges.failed(record, JSONResponse(codex_catalog(patterns)))
