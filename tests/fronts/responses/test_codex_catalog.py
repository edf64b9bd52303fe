"""Codex CLI's model metadata from the proxy: a provider whose key comes from a command fetches
`GET /v1/models?client_version=...` from its base URL, and the proxy answers it with a catalog
for the routes' models (proxy/fronts/responses/codex_catalog.py). Codex then knows a vendor
model's name (no "Model metadata ... not found"), offers it the freeform `apply_patch`, and
applies the patch the model writes, with no `model_catalog_json`. A `GET /v1/models` without
`client_version` is still the upstream's."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from proxy.fronts.responses.codex_catalog import CATCH_ALL_SLUG
from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.fronts.responses.codex import completed_items, rollout_items, run_codex
from tests.fronts.responses.test_codex_tools import (
    NOTE_FILE,
    PATCH,
    PATCH_ANSWER,
    VENDORS,
    accepted,
    offered,
    upstream,
)
from tests.support.fake_upstream import running_fake_upstream
from tests.support.gemini_upstream import Step, TextStep, tool_step
from tests.support.servers import serve_in_thread

PROXY_KEY = "sfx-codex-catalog-key"


@pytest.mark.parametrize("vendor", VENDORS)
def test_codex_knows_a_vendor_model_from_the_proxy(vendor: str, tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    script: list[Step] = [tool_step(("apply_patch", {"input": PATCH})), TextStep(PATCH_ANSWER)]
    with upstream(vendor, script) as (fake, proxy, model):
        events = run_codex(
            proxy, model, "add the note file", work=work, home=home, key_command=True
        )
        warnings = [e["message"] for e in completed_items(events, "error")]
        assert not [w for w in warnings if "metadata" in w.lower()], warnings
        accepted(fake, vendor)
        assert len(fake.requests) == 2  # the catalog never reached the upstream
        tool = offered(fake.requests[0], "apply_patch")
        assert tool["parameters"]["required"] == ["input"]
        # The catalog's own instructions came first, in place of Codex's fallback prompt.
        first = fake.requests[0].json["messages"][0]
        assert first["role"] == "system" and "apply_patch" in str(first["content"])
        kept = {item["type"]: item for item in rollout_items(home)}
        assert kept["custom_tool_call"]["input"] == PATCH
        assert (work / NOTE_FILE).read_text() == "patched through streamfix\n"


def catalog_stack(root: str, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("STREAMFIX_API_KEYS", PROXY_KEY)
    routes = [
        {"name": "kimi", "models": ["kimi-k2", "kimi-*"], "base_url": f"{root}/v1"},
        {"name": "deepseek", "models": ["deepseek-chat", "kimi-k2"], "base_url": f"{root}/v1"},
    ]
    settings = Settings().with_values({"upstream.base_url": f"{root}/v1", "routes": routes})
    return create_app(settings)


def test_the_catalog_names_the_routes_models_behind_the_proxy_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with (
        running_fake_upstream() as (fake, root),
        serve_in_thread(catalog_stack(root, monkeypatch)) as proxy,
    ):
        url = f"{proxy}/v1/models?client_version=0.171.0"
        assert httpx.get(url).status_code == 401
        answer = httpx.get(url, headers={"authorization": f"Bearer {PROXY_KEY}"})
        assert answer.status_code == 200, answer.text
        models = answer.json()["models"]
        slugs = [(m["slug"], m["visibility"]) for m in models]
        assert slugs == [("kimi-k2", "list"), ("deepseek-chat", "list"), (CATCH_ALL_SLUG, "hide")]
        assert {m["apply_patch_tool_type"] for m in models} == {"freeform"}
        assert max(m["priority"] for m in models) == models[-1]["priority"]
        assert not fake.requests
        # Any other listing is the upstream's own, as before.
        listing = httpx.get(f"{proxy}/v1/models", headers={"authorization": f"Bearer {PROXY_KEY}"})
        assert listing.status_code == 200 and "data" in listing.json(), listing.text
