"""Replays do not depend on order: a cassette replays the same alone, in order, reversed or in
parallel.

A follow-up turn goes upstream with what the proxy's receipt store adds to it: the signature it
captured from the turn before, Google's placeholder when it has none, or the Google metadata
stripped when it never saw this upstream issue any. The same client request therefore reaches
the replay transport in different shapes depending on what ran before in that process. These
tests replay each conversation the way test runners do: in order, each request alone with a
fresh proxy (`pytest -k`), in reverse (random order), and spread over two proxies at once, each
with its own store (`pytest-xdist`); every way gives the client the same bytes as in order.

- The committed corpus (recordings/), as clients that drop receipts send it and as clients that
  send them back.
- A Gemini two-turn tool flow recorded here through the OpenAI SDK in front of the fake Gemini
  (tests/support/gemini_upstream.py), under the evidence profile and under the configured `gemini`
  profile (which fills Google's placeholder on a miss): signatures on calls, on a text turn,
  injected, stripped and placeholder'd.
- Matching is not weakened: a changed tool result or call still gets the 404, naming the
  client's field and not a receipt; cassettes recorded with the very receipts a request carries
  win over those that differ only there; receipt paths outside assistant turns still count.
- `streamfix replay` (each cassette alone) passes on the recorded flow.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import orjson
import pytest

from proxy.replay_check import check_directory
from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette, Chunk, canonical_request, proxy_written_fields
from proxy.upstream.recording import ReplayTransport
from tests.support.gemini_upstream import TOOL_SCHEMAS, TWO_STEPS, running_gemini_upstream
from tests.support.proxies import running_proxy
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
API_KEY = "sk-test-replay-order"
HEADERS = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}

Replayed = tuple[int, bytes]
"""(status, body) of one replayed request, as the client got it."""


# ── a replaying proxy, in process, with a store of its own ───────────────────


@asynccontextmanager
async def replaying_proxy(
    directory: Path, base_url: str, profile: str = "auto"
) -> AsyncIterator[httpx.AsyncClient]:
    """A fresh proxy replaying `directory` (so a fresh memory store), and a client for it."""
    settings = Settings().with_values(
        {
            "upstream.base_url": base_url,
            "upstream.profile": profile,
            "recording.replay_dir": str(directory),
            "repairs.strict": True,
        }
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://replay", timeout=30
        ) as client,
    ):
        yield client


async def send(client: httpx.AsyncClient, body: bytes) -> Replayed:
    response = await client.post("/v1/chat/completions", content=body, headers=HEADERS)
    return response.status_code, response.content


@dataclass(frozen=True)
class Conversation:
    """Recorded cassettes and the client requests that replay them, in recorded order."""

    directory: Path
    base_url: str
    profile: str
    requests: list[bytes]


async def in_order(conversation: Conversation) -> list[Replayed]:
    async with _proxy(conversation) as client:
        return [await send(client, body) for body in conversation.requests]


async def each_alone(conversation: Conversation) -> list[Replayed]:
    """`pytest -k`: every request in a process that has replayed nothing before."""
    results = []
    for body in conversation.requests:
        async with _proxy(conversation) as client:
            results.append(await send(client, body))
    return results


async def reversed_order(conversation: Conversation) -> list[Replayed]:
    """Random order at its worst: every follow-up before the turn it follows."""
    async with _proxy(conversation) as client:
        backwards = [await send(client, body) for body in reversed(conversation.requests)]
    return backwards[::-1]


async def two_in_parallel(conversation: Conversation) -> list[Replayed]:
    """`pytest-xdist`: two workers, each with its own proxy and store, all requests at once,
    alternating between them."""
    results: list[Replayed | None] = [None] * len(conversation.requests)
    async with AsyncExitStack() as stack:
        workers = [await stack.enter_async_context(_proxy(conversation)) for _ in range(2)]

        async def one(position: int, body: bytes) -> None:
            results[position] = await send(workers[position % 2], body)

        async with anyio.create_task_group() as group:
            for position, body in enumerate(conversation.requests):
                group.start_soon(one, position, body)
    return [result for result in results if result is not None]


def _proxy(conversation: Conversation) -> Any:
    return replaying_proxy(conversation.directory, conversation.base_url, conversation.profile)


ORDERS: dict[str, Callable[[Conversation], Any]] = {
    "alone": each_alone,
    "reversed": reversed_order,
    "parallel": two_in_parallel,
}


def assert_same_as_in_order(conversation: Conversation, order: str) -> list[Replayed]:
    expected = anyio.run(in_order, conversation)
    got = anyio.run(ORDERS[order], conversation)
    assert len(got) == len(expected)
    for position, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"request {position} {order}: {have[0]} {have[1][:400]!r}"
    return expected


# ── what clients send back ───────────────────────────────────────────────────


def receipts_dropped(body: bytes) -> bytes:
    """The request as most clients rebuild it: assistant turns without `extra_content`,
    `reasoning_content` or `reasoning_details` (written here, not taken from the matcher)."""
    parsed = orjson.loads(body)
    for message in parsed.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for name in ("extra_content", "reasoning_content", "reasoning_details"):
            message.pop(name, None)
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                call.pop("extra_content", None)
    return orjson.dumps(parsed)


CLIENTS: dict[str, Callable[[bytes], bytes]] = {
    # The OpenAI Python SDK rebuilt by hand, the Vercel AI SDK v1/v2: receipts gone.
    "drops receipts": receipts_dropped,
    # The OpenAI Node SDK's stream helper, the Vercel AI SDK v3: receipts sent back as received.
    "sends receipts back": lambda body: body,
}


# ── the committed corpus ─────────────────────────────────────────────────────


def corpus(client: str) -> Conversation:
    paths = sorted(RECORDINGS.glob("*.json"))
    bodies = [Cassette.load(path).request_body for path in paths]
    return Conversation(
        RECORDINGS, "http://127.0.0.1:8000/v1", "auto", [CLIENTS[client](b) for b in bodies]
    )


def test_the_corpus_holds_multi_turn_cassettes() -> None:
    """The order tests below mean something only if some cassette follows another."""
    follow_ups = [
        path.name
        for path in RECORDINGS.glob("*.json")
        if any(m.get("role") == "assistant" for m in Cassette.load(path).body_json["messages"])
    ]
    assert "kimi_reused_ids_round2.json" in follow_ups


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("order", ORDERS)
def test_corpus_replays_the_same_in_any_order(order: str, client: str) -> None:
    conversation = corpus(client)
    expected = assert_same_as_in_order(conversation, order)
    paths = sorted(RECORDINGS.glob("*.json"))
    assert [status for status, _ in expected] == [Cassette.load(p).status for p in paths]


# ── a Gemini two-turn flow, recorded here ────────────────────────────────────

PROFILES = ("auto", "gemini")
"""`auto`: the fake on 127.0.0.1 gets the profile the proxy picks by itself; `gemini`:
configured, so a current-turn call without a signature gets Google's placeholder."""


TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": schema}}
    for name, schema in TOOL_SCHEMAS.items()
]


def agent_turn(client: openai.OpenAI, messages: list[dict[str, Any]], max_steps: int = 4) -> None:
    """One user turn of an agent loop with the SDK's stream helper, the history rebuilt by hand
    from the parsed calls (so without any signature), until a text answer. Appends to
    `messages`."""
    for _ in range(max_steps):
        with client.chat.completions.stream(
            model="gemini-3-flash-preview", messages=messages, tools=TOOLS
        ) as stream:
            message = stream.get_final_completion().choices[0].message
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls or []
        ]
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        if not calls:
            messages[-1].pop("tool_calls")
            return
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "hello"})
    raise AssertionError(f"no text answer after {max_steps} steps")


@pytest.fixture(scope="module", params=PROFILES)
def gemini_flow(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Conversation:
    """Two user turns of call -> text through a recording proxy, with the OpenAI SDK dropping
    every signature: four requests, the last three follow-ups whose signatures (on a call, on a
    text turn) only the proxy's store puts back."""
    profile = request.param
    directory = tmp_path_factory.mktemp(f"gemini-{profile}")
    sent: list[bytes] = []
    with running_gemini_upstream(TWO_STEPS) as (fake, root):
        base_url = f"{root}/v1beta/openai"
        config = {"recording.record_dir": str(directory), "upstream.profile": profile}
        with (
            running_proxy(base_url, **config) as proxy,
            httpx.Client(event_hooks={"request": [lambda r: sent.append(r.content)]}) as http,
        ):
            client = openai.OpenAI(
                base_url=f"{proxy}/v1", api_key=API_KEY, max_retries=0, http_client=http
            )
            messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
            agent_turn(client, messages)
            messages.append({"role": "user", "content": "and once more"})
            agent_turn(client, messages)
            _wait_for_files(directory, len(sent))
        assert fake.rejections == 0
    return Conversation(directory, base_url, profile, sent)


def _wait_for_files(directory: Path, count: int, timeout: float = 10.0) -> None:
    """Cassettes are written when each exchange is over, just after the client has it."""
    wait_until(lambda: len(list(directory.glob("*.json"))) >= count, f"{count} cassettes", timeout)


def recorded(conversation: Conversation) -> list[Cassette]:
    return [Cassette.load(path) for path in sorted(conversation.directory.glob("*.json"))]


def test_the_recorded_flow_has_follow_ups_with_signatures_only_the_store_knew(
    gemini_flow: Conversation,
) -> None:
    cassettes = recorded(gemini_flow)
    assert len(cassettes) == len(gemini_flow.requests) == 4
    for cassette, sent in zip(cassettes[1:], gemini_flow.requests[1:], strict=True):
        assert b"thought_signature" in cassette.request_body
        assert b"thought_signature" not in sent


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("order", ORDERS)
def test_gemini_follow_ups_replay_the_same_in_any_order(
    gemini_flow: Conversation, order: str, client: str
) -> None:
    requests = gemini_flow.requests
    if client == "sends receipts back":
        requests = [cassette.request_body for cassette in recorded(gemini_flow)]
    conversation = Conversation(
        gemini_flow.directory, gemini_flow.base_url, gemini_flow.profile, requests
    )
    expected = assert_same_as_in_order(conversation, order)
    # In order, the client gets what it got live.
    live = [(cassette.status, cassette.client_body) for cassette in recorded(gemini_flow)]
    assert expected == live


def test_streamfix_replay_passes_on_the_recorded_flow(gemini_flow: Conversation) -> None:
    """`streamfix replay DIR` replays every cassette alone, its recorded request as the client's."""
    results = anyio.run(check_directory, gemini_flow.directory, Settings())
    assert [(r.name, r.ok, r.diff) for r in results] == [(r.name, True, []) for r in results]


# ── matching stays strict ────────────────────────────────────────────────────


def _follow_up(conversation: Conversation) -> dict[str, Any]:
    """The first follow-up as the client sent it: user, assistant call, tool result."""
    return orjson.loads(conversation.requests[1])


async def _alone(conversation: Conversation, body: dict[str, Any]) -> httpx.Response:
    async with _proxy(conversation) as client:
        return await client.post("/v1/chat/completions", json=body, headers=HEADERS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["messages"][2].update(content="other result"), "body.messages[2].content"),
        (
            lambda b: b["messages"][1]["tool_calls"][0]["function"].update(arguments="{}"),
            "body.messages[1].tool_calls[0].function.arguments",
        ),
        (
            lambda b: (
                b["messages"][1]["tool_calls"][0].update(id="another"),
                b["messages"][2].update(tool_call_id="another"),
            ),
            "body.messages[1].tool_calls[0].id",
        ),
    ],
    ids=["tool result", "call arguments", "call id"],
)
def test_a_changed_follow_up_still_gets_the_404_naming_the_clients_field(
    gemini_flow: Conversation, change: Any, field: str
) -> None:
    body = _follow_up(gemini_flow)
    change(body)
    response = anyio.run(_alone, gemini_flow, body)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "no_matching_cassette"
    assert "0002-" in error["message"], error["message"]
    assert f"differs at {field}" in error["message"]


def test_the_cassette_recorded_with_the_same_receipts_wins() -> None:
    """Two recordings of one request that differ only in the signature the proxy put on it:
    each request gets its own, every time; a third signature gets either, round robin."""

    def cassette(signature: str) -> Cassette:
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        call["extra_content"] = {"google": {"thought_signature": signature}}
        body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
        body["messages"].append({"role": "assistant", "content": None, "tool_calls": [call]})
        return Cassette(
            method="POST",
            path="chat/completions",
            query="",
            request_headers={},
            request_body=orjson.dumps(body),
            status=200,
            chunks=[Chunk(0.0, signature.encode())],  # the response names the cassette
        )

    placeholder, real = cassette("skip_thought_signature_validator"), cassette("c2ln")
    transport = ReplayTransport([placeholder, real], "http://upstream.invalid/v1")

    async def served(request_body: bytes) -> bytes:
        request = httpx.Request(
            "POST", "http://upstream.invalid/v1/chat/completions", content=request_body
        )
        response = await transport.handle_async_request(request)
        return b"".join([bytes(piece) async for piece in response.stream])

    for _ in range(3):
        assert anyio.run(served, real.request_body) == b"c2ln"
        assert anyio.run(served, placeholder.request_body) == b"skip_thought_signature_validator"
    other = cassette("b3RoZXI=").request_body
    assert {anyio.run(served, other) for _ in range(2)} == {
        b"c2ln",
        b"skip_thought_signature_validator",
    }


def test_only_where_the_proxy_writes_receipts_are_they_left_out() -> None:
    fields = proxy_written_fields()
    signature = ("extra_content", "google", "thought_signature")
    assert signature in fields.on_calls
    assert ("extra_content", "vertex", "thought_signature") in fields.on_calls
    assert {signature, ("reasoning_content",), ("reasoning_details",)} <= set(fields.on_assistant)

    def key(messages: Sequence[dict[str, Any]]) -> bytes:
        return canonical_request("POST", "chat/completions", orjson.dumps({"messages": messages}))

    assistant = {"role": "assistant", "content": "hi"}
    # On an assistant turn: with or without its receipt, the same request.
    assert key([assistant | {"reasoning_content": "thought"}]) == key([assistant])
    # Anywhere else the field is the client's, and compared.
    user = {"role": "user", "content": "hi"}
    assert key([user | {"reasoning_content": "thought"}]) != key([user])
    assert key([assistant | {"content": "other"}]) != key([assistant])


@pytest.mark.parametrize("holder", [None, {}], ids=["null", "empty"])
def test_an_empty_holder_the_proxy_fills_compares_like_none(holder: Any) -> None:
    """The repair writes a signature into `extra_content: null` or `{}` as into no field."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    signed = call | {"extra_content": {"google": {"thought_signature": "c2ln"}}}

    def key(sent: dict[str, Any]) -> bytes:
        message = {"role": "assistant", "content": None, "tool_calls": [sent]}
        return canonical_request("POST", "chat/completions", orjson.dumps({"messages": [message]}))

    assert key(call | {"extra_content": holder}) == key(signed) == key(call)
    kept = call | {"extra_content": {"gateway": {"trace": "t1"}}}
    assert key(kept) != key(call)  # what else the client put there still counts
