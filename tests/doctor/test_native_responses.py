"""`streamfix doctor` asks whether the upstream also offers a native `POST /v1/responses`,
with a body a Responses endpoint refuses before generating (`input` a number), and says what
the answer showed and why streamfix's Responses front bridges to chat completions anyway.
Through the real doctor CLI against the fakes of tests/doctor/upstreams.py, with and without
the endpoint; the verdict's rules on the answers other servers give."""

from __future__ import annotations

import json

import pytest

from proxy.cli import main
from proxy.doctor.checks import CHECKS
from proxy.doctor.native_responses import judge, probe_body
from tests.doctor.upstreams import Quirks, running

BRIDGED = "streamfix's Responses front bridges to chat completions instead (bypassing it)"


def doctor(quirks: Quirks, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, object]:
    with running(quirks) as (url, fake):
        code = main(["doctor", "--upstream", url, "--model", "m", "--yes", *extra])
    assert code == 0
    return capsys.readouterr().out, fake


@pytest.mark.parametrize("shape", ["openai", "vllm"])
def test_a_native_responses_endpoint_is_noted_and_bypassed(
    shape: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, fake = doctor(Quirks(native_responses=shape), capsys, "--json")
    native = json.loads(out)["native_responses"]
    assert native["offered"] is True and native["status"] == 400
    assert "input" in native["said"]
    assert native["note"].startswith("the upstream offers /v1/responses natively (answered 400")
    assert BRIDGED in native["note"]
    assert "repairs work on the chat stream" in native["note"]
    assert "every receipt" in native["note"]
    # One probe, the body a native endpoint refuses before generating; the battery as before.
    assert fake.responses_requests == [probe_body("m")]  # type: ignore[attr-defined]
    assert len(fake.requests) == len(CHECKS)  # type: ignore[attr-defined]


def test_no_native_endpoint_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    out, fake = doctor(Quirks(), capsys)
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert note == (
        "note: the upstream has no /v1/responses (answered 404); Responses clients such as "
        "Codex need streamfix's Responses front, which bridges to chat completions."
    )
    assert len(fake.responses_requests) == 1  # type: ignore[attr-defined]
    # The note sits between the totals and the configuration to paste, which stays TOML.
    assert out.index("fine, 0 fixed, 0 not_fixable") < out.index(note) < out.index("# Suggested")


def test_the_text_report_says_it_natively(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = doctor(Quirks(native_responses="openai"), capsys)
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert "offers /v1/responses natively" in note and "Invalid type for 'input'" in note


def test_the_verdict_comes_from_the_wire() -> None:
    openai_model = (
        b'{"error": {"message": "The model `m` does not exist or you do not have '
        b'access to it.", "type": "invalid_request_error", "param": null, '
        b'"code": "model_not_found"}}'
    )
    assert judge(404, openai_model).offered is True  # the endpoint read the body
    assert judge(404, b'{"detail":"Not Found"}').offered is False  # FastAPI, no route
    assert judge(405, b"Method Not Allowed").offered is False
    assert judge(200, b'{"id": "resp_1"}').offered is True
    # A 400 about something else, a key refused, a server error: not known, said as it came.
    other = judge(400, b'{"error": {"message": "Invalid model name", "param": "model"}}')
    assert other.offered is None and other.said == "Invalid model name"
    assert "could not tell" in other.note
    assert judge(401, b'{"error": {"message": "Incorrect API key"}}').offered is None
    assert judge(500, b"Internal Server Error").offered is None
    # OpenRouter's zod errors name the place; OpenAI's param does.
    zod = b'{"error": {"message": "Invalid input: expected string, received number"}}'
    assert judge(400, zod).offered is True
    openai = b'{"error": {"message": "Invalid type.", "param": "input", "code": "invalid_type"}}'
    assert judge(400, openai).offered is True
