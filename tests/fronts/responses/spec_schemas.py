"""The Open Responses schemas (spec/openapi_response_schemas.json, its provenance in spec/
README.md) as validators: the response object and every streaming event by its `type`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SPEC = orjson.loads((Path(__file__).parent / "spec" / "openapi_response_schemas.json").read_bytes())
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]
_REGISTRY = Registry().with_resource("spec", Resource.opaque(SPEC))


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"spec#/components/schemas/{name}"}, registry=_REGISTRY)


RESPONSE = _validator("ResponseResource")
EVENTS = {
    schema["properties"]["type"]["enum"][0]: _validator(name)
    for name, schema in SCHEMAS.items()
    if name.endswith("StreamingEvent")
}
"""Each streaming event's validator by the event's `type`."""


def violations(validator: Draft202012Validator, value: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(value)
    ]


def check_response(response: Any) -> None:
    assert not violations(RESPONSE, response), violations(RESPONSE, response)


def check_event(event: dict[str, Any]) -> None:
    kind = event.get("type")
    assert kind in EVENTS, f"{kind!r} is no event of the spec"
    found = violations(EVENTS[kind], event)
    assert not found, (kind, found)
