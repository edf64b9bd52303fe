"""`streamfix doctor` against fake upstreams under a real uvicorn on 127.0.0.1 (tests/doctor/
upstreams.py): each quirk named on its row with the verdict the proxy earns, the suggested
configuration, the JSON shape, nothing sent without --yes, the key only in the Authorization
header, and --from DIR over cassettes the proxy's own recording wrote."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cli import main
from proxy.doctor.checks import CHECKS, Context
from proxy.doctor.probe import Limits, OutOfTime
from tests.doctor import upstreams
from tests.doctor.upstreams import Quirks, running
from tests.support.proxies import running_proxy
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
NAMES = [check.name for check in CHECKS]


def doctor_json(quirks: Quirks, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    with running(quirks) as (url, fake):
        code = main(["doctor", "--upstream", url, "--model", "m", "--yes", "--json", *extra])
    out = capsys.readouterr().out
    document = json.loads(out)
    document["exit"] = code
    document["fake"] = fake
    return document


def verdicts(document: Any) -> dict[str, str]:
    return {check["name"]: check["verdict"] for check in document["checks"]}


def row(document: Any, name: str) -> dict[str, str]:
    return next(check for check in document["checks"] if check["name"] == name)


def test_the_battery_is_small_and_in_the_stated_order() -> None:
    assert NAMES == [
        "plain_stream",
        "tool_call_stream",
        "tool_call_json",
        "parallel_calls",
        "follow_up",
        "developer_role",
        "schema_keywords",
        "dotted_tool_name",
        "two_system_messages",
        "include_usage",
        "tiny_max_tokens",
    ]
    assert len(NAMES) == 11 <= 12


def test_a_clean_upstream_gets_no_complaint(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.OPENAI, capsys)
    assert verdicts(document) == dict.fromkeys(NAMES, "fine")
    assert document["exit"] == 0
    assert set(document) - {"exit", "fake"} == {
        "upstream",
        "model",
        "checks",
        "config",
        "native_responses",
    }
    assert set(document["checks"][0]) == {"name", "observed", "breaks", "streamfix", "verdict"}
    assert document["model"] == "m"
    assert document["config"] == {
        "upstream": {"base_url": document["upstream"], "profile": "generic"}
    }
    # Each check once, direct; the proxy forwarded every request unchanged, so no second send.
    assert len(document["fake"].requests) == len(NAMES)
    sent = {body["max_tokens"] for body in document["fake"].requests}
    assert sent == {64, 1}  # 1 only for tiny_max_tokens


def test_openais_own_fragmented_stream_is_fine(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 26: a call's arguments in several fragments after its opening delta is how OpenAI
    # streams every call, and every client takes it. Before: "call 0 sent in more than one
    # delta" on every row with a call, verdict `fixed`.
    document = doctor_json(upstreams.OPENAI_FRAGMENTS, capsys)
    fake = document["fake"]
    request = next(r for r in fake.requests if r.get("stream") and r.get("tools"))
    streamed = fake._stream(request, fake._calls(request)).decode()
    assert streamed.count('"arguments":"') > 2  # really in fragments: opening, then pieces
    assert verdicts(document) == dict.fromkeys(NAMES, "fine"), document["checks"]
    assert all(check["breaks"] == "nothing" for check in document["checks"]), document["checks"]
    assert document["exit"] == 0


def test_a_gemini_like_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.GEMINI, capsys)
    assert verdicts(document) == {
        "plain_stream": "fine",
        "tool_call_stream": "fixed",
        "tool_call_json": "fine",  # Gemini's JSON answers carry no quirk here
        "parallel_calls": "fixed",
        "follow_up": "fixed",
        "developer_role": "fine",
        "schema_keywords": "not_fixable",  # on a host no profile knows, the dialect is off
        "dotted_tool_name": "fixed",
        "two_system_messages": "fine",
        "include_usage": "fine",
        "tiny_max_tokens": "fine",
    }
    stream = row(document, "tool_call_stream")
    assert "without an integer index" in stream["observed"]
    assert "finished with 'stop'" in stream["observed"]
    assert "agent loops end" in stream["breaks"]
    assert "tool_call_index_added" in stream["streamfix"]
    assert "finish_reason_rewritten" in stream["streamfix"]
    schema = row(document, "schema_keywords")
    assert 'Unknown name "additionalProperties"' in schema["observed"]
    assert document["config"]["upstream"]["schema_dialect"] == "gemini"
    # The suggestion is tried, not hoped for: the check once more with the key, accepted.
    assert schema["streamfix"].endswith('with schema_dialect = "gemini": fixed')
    retried = [r for r in document["fake"].requests if "place" in str(r.get("tools"))][-1]
    assert "place" in str(retried["tools"]) and "additionalProperties" not in str(retried)
    assert "tool_names" not in document["config"]["upstream"]
    assert document["exit"] == 1


def test_a_kimi_like_upstream_reuses_ids(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.KIMI, capsys)
    assert verdicts(document) == {**dict.fromkeys(NAMES, "fine"), "follow_up": "fixed"}
    follow_up = row(document, "follow_up")
    assert "reused from an earlier turn: functions.get_weather:0" in follow_up["observed"]
    assert "Open WebUI" in follow_up["breaks"]
    assert "call_id_reused" in follow_up["streamfix"]


def test_a_vllm_like_upstream_without_ids_and_names(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.VLLM, capsys)
    found = verdicts(document)
    assert found["tool_call_stream"] == "fixed"
    assert found["tool_call_json"] == "fixed"
    # Two nameless calls with two tools offered: the name cannot be inferred, the calls are
    # left out rather than sent nameless, and the row says so.
    assert found["parallel_calls"] == "not_fixable"
    stream = row(document, "tool_call_stream")
    assert "Expected 'id' to be a string" in stream["breaks"]
    assert "tool_call_id_generated" in stream["streamfix"]


def test_a_vllm_like_upstream_writing_markup(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.VLLM_MARKUP, capsys)
    found = verdicts(document)
    assert found["plain_stream"] == "fine"
    assert found["tool_call_stream"] == found["tool_call_json"] == "fixed"
    assert "text_tool_call" in row(document, "tool_call_stream")["streamfix"]
    assert "markup" in row(document, "tool_call_stream")["observed"]


def test_a_deepseek_like_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.DEEPSEEK, capsys)
    found = verdicts(document)
    assert found["follow_up"] == "fixed"  # the receipt repair sends reasoning_content back
    follow_up = row(document, "follow_up")
    assert "must be passed back to the API" in follow_up["observed"]
    assert "reasoning_content_injected" in follow_up["streamfix"]
    # The proxy learns the name rule from the refusal (learning/refusal_rules.py); the key is
    # still suggested, to skip that first refusal.
    assert found["dotted_tool_name"] == "fixed"
    assert document["config"]["upstream"]["tool_names"] == "openai"
    names = row(document, "dotted_tool_name")["streamfix"]
    assert "tool_names_learned x1" in names
    assert names.endswith(
        'with tool_names = "openai": fixed; '
        "tool_names learned automatically; set it to skip the first refusal"
    )
    # The follow-up went once direct (400) and once as the proxy repaired it (accepted).
    follow_ups = [r for r in document["fake"].requests if r["messages"][-1]["role"] == "tool"]
    assert [("reasoning_content" in r["messages"][1]) for r in follow_ups] == [False, True]


def test_route_block_and_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    with running(upstreams.GEMINI) as (url, _):
        main(["doctor", "--upstream", url, "--model", "m", "--yes", "--route", "gem"])
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # no colour when not a terminal
    lines = out.splitlines()
    assert any(line.startswith("not_fixable schema_keywords") for line in lines)
    assert any(line.startswith("fine        plain_stream") for line in lines)
    toml = out[out.index("[[routes]]") :]
    assert tomllib.loads(toml) == {
        "routes": [
            {
                "name": "gem",
                "models": ["m"],
                "base_url": url,
                "profile": "generic",
                "schema_dialect": "gemini",
            }
        ]
    }


def test_nothing_is_sent_without_yes(tmp_path: Path) -> None:
    with running(upstreams.OPENAI) as (url, fake):
        result = subprocess.run(
            [sys.executable, "-m", "proxy", "doctor", "--upstream", url, "--model", "m"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert fake.requests == [] and fake.responses_requests == []
    assert f"one request to {url}/responses whose `input` is a number" in result.stderr
    assert f"would send {len(NAMES)} requests" in result.stderr
    assert "dotted_tool_name" in result.stderr
    assert "nothing sent (pass --yes to send)" in result.stderr


def test_the_key_goes_only_into_the_authorization_header(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-doctor-secret-1234567890"
    monkeypatch.setenv("DOCTOR_TEST_KEY", key)
    for quirks in (upstreams.DEEPSEEK, upstreams.GEMINI, Quirks(echoes_key=True)):
        with running(quirks) as (url, fake):
            for extra in ([], ["--json"]):
                main(
                    [
                        "doctor",
                        "--upstream",
                        url,
                        "--model",
                        "m",
                        "--yes",
                        "--api-key-env",
                        "DOCTOR_TEST_KEY",
                        *extra,
                    ]
                )
                captured = capsys.readouterr()
                assert key not in captured.out + captured.err
                if quirks.echoes_key:  # the upstream quoted the key; the report masks it
                    assert "Incorrect API key provided: ****." in captured.out
                assert 'api_key_env = "DOCTOR_TEST_KEY"' in captured.out or extra
        assert {h.get("authorization") for h in fake.headers} == {f"Bearer {key}"}


def test_an_unset_key_variable_is_one_line_and_sends_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCTOR_UNSET_KEY", raising=False)
    with running(upstreams.OPENAI) as (url, fake):
        code = main(
            [
                "doctor",
                "--upstream",
                url,
                "--model",
                "m",
                "--yes",
                "--api-key-env",
                "DOCTOR_UNSET_KEY",
            ]
        )
    err = capsys.readouterr().err
    assert code == 2 and fake.requests == []
    assert err == "streamfix doctor: --api-key-env DOCTOR_UNSET_KEY: that variable is not set\n"


def test_an_unreachable_upstream_stops_at_once_with_the_proxys_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not eleven `not_fixable ... ConnectError` rows and a config to paste: the first
    connection failure ends the run with the line the proxy itself answers a client with."""
    with running(upstreams.OPENAI) as (url, _):
        pass  # the server is gone: its port refuses
    port = httpx.URL(url).port
    code = main(["doctor", "--upstream", url, "--model", "m", "--yes", "--json", "--timeout", "5"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == (
        f"streamfix doctor: upstream 127.0.0.1:{port} refused the connection"
    )


def test_from_recorded_cassettes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    requests = {
        "plain": {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        "call": CHECKS[1].body(Context("m")),
    }
    with running(upstreams.GEMINI) as (url, fake):
        with running_proxy(url, **{"recording.record_dir": str(tmp_path)}) as proxy:
            for body in requests.values():
                httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=30).raise_for_status()
        wait_until(lambda: len(list(tmp_path.glob("*.json"))) == 2, "two cassettes")
    sent = len(fake.requests)
    code = main(["doctor", "--from", str(tmp_path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert len(fake.requests) == sent  # offline: nothing sent
    assert code == 0
    assert document["upstreams"] == [{"base_url": url, "profile": "generic", "cassettes": 2}]
    assert document["config"] is None  # cassettes show answers, not what an upstream accepts
    assert {check["upstream"] for check in document["checks"]} == {url}
    assert sorted(verdicts(document).values()) == ["fine", "fixed"]
    fixed = next(c for c in document["checks"] if c["verdict"] == "fixed")
    assert "without an integer index" in fixed["observed"]
    assert "tool_call_index_added" in fixed["streamfix"]


def test_from_the_repositorys_recordings_per_choice_and_per_recorded_upstream(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The repository's corpus: `n` = 2 with calls ending `tool_calls` in choice 0 and text
    ending `stop` in choice 1 is right (each choice judged on its own); the report names each
    upstream and profile the cassettes recorded and no model or configuration they did not."""
    code = main(["doctor", "--from", str(ROOT / "recordings")])
    out = capsys.readouterr().out
    lines = out.splitlines()
    n2 = next(line for line in lines if "openai_n2_choices" in line)
    assert n2.split()[0] == "fine", n2
    assert lines[0].startswith("streamfix doctor --from ")
    assert "recorded against 2 upstreams" in lines[0]
    assert "recorded against http://127.0.0.1:8000/v1, profile gemini: 10 cassettes" in lines
    assert "recorded against http://127.0.0.1:8000/v1, profile generic: 17 cassettes" in lines
    assert ", model " not in out and "Suggested configuration" not in out
    assert "[upstream]" not in out and "base_url =" not in out
    assert "No configuration suggested" in out
    assert code == 1  # the recorded 429 and 500 and Gemini's 400: nothing a proxy can fix


def test_a_choice_with_calls_that_stops_is_named(tmp_path: Path) -> None:
    """Per choice both ways: choice 1's calls ending `stop` are still found, and named."""
    from proxy.doctor.examine import problems, read_answer

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": index, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    call = {"index": 0, "id": "c1", "type": "function"}
    call["function"] = {"name": "f", "arguments": "{}"}
    body = b"".join(
        [
            chunk(0, {"role": "assistant", "content": "hi"}),
            chunk(1, {"role": "assistant", "tool_calls": [call]}),
            chunk(0, {}, "stop"),
            chunk(1, {}, "stop"),
            b"data: [DONE]\n\n",
        ]
    )
    found = [p.text for p in problems(read_answer(200, body, True), {}, 0)]
    assert any("sent calls but finished with 'stop'" in text for text in found), found
    assert not any(text.startswith("sent calls") for text in found), found  # choice 1 named


def test_from_a_directory_without_cassettes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--from", str(tmp_path)]) == 2
    assert "no cassettes" in capsys.readouterr().err


@pytest.mark.parametrize(("typed", "sent"), [("y", True), ("n", False), ("", False)])
def test_a_terminal_confirms_with_y(
    typed: str,
    sent: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    prompts: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or typed)
    with running(upstreams.OPENAI) as (url, fake):
        code = main(["doctor", "--upstream", url, "--model", "m"])
    assert prompts == [f"Send these {len(NAMES)} requests? [y/N] "]
    assert bool(fake.requests) is sent
    assert code == (0 if sent else 2)
    capsys.readouterr()


def test_a_compressed_upstream_is_examined_decoded(capsys: pytest.CaptureFixture[str]) -> None:
    gemini_gzip = Quirks(**{**upstreams.GEMINI.__dict__, "gzip": True})
    document = doctor_json(gemini_gzip, capsys)
    assert document["fake"].headers[0]["accept-encoding"]  # the answers went compressed
    plain = doctor_json(upstreams.GEMINI, capsys)
    assert verdicts(document) == verdicts(plain)


def test_the_request_budget_bounds_a_run() -> None:
    limits = Limits(timeout=30.0, total=60.0, requests=2)
    assert limits.take() == 30.0
    limits.take()
    with pytest.raises(OutOfTime):
        limits.take()
    spent = Limits(timeout=30.0, total=0.0, requests=5)
    with pytest.raises(OutOfTime):
        spent.take()


def test_a_password_in_the_url_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    with running(upstreams.OPENAI) as (url, fake):
        with_password = url.replace("http://", "http://doctor:hunter2@")
        code = main(["doctor", "--upstream", with_password, "--model", "m", "--yes"])
    captured = capsys.readouterr()
    assert code == 0 and fake.requests
    assert "hunter2" not in captured.out + captured.err
    assert 'base_url = "http://****@127.0.0.1' in captured.out


def test_a_vllm_qwen_like_upstream_refuses_a_late_system_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = doctor_json(upstreams.VLLM_QWEN, capsys)
    # The proxy learns the merge from the refusal (learning/refusal_rules.py).
    assert verdicts(document) == {
        **dict.fromkeys(NAMES, "fine"),
        "two_system_messages": "fixed",
    }
    two = row(document, "two_system_messages")
    assert two["observed"] == "rejected: 400 System message must be at the beginning."
    assert two["breaks"] == "every client sending two system messages (opencode): the request fails"
    assert two["streamfix"].startswith("system_messages_learned x1, system_messages_merged x1")
    # Tried once through a proxy with the key, and suggested because that was accepted, and
    # because it saves the first refusal.
    assert two["streamfix"].endswith(
        'with system_messages = "merged": fixed; '
        "system_messages learned automatically; set it to skip the first refusal"
    )
    assert document["config"]["upstream"]["system_messages"] == "merged"
    merged = document["fake"].requests[-1]["messages"]
    assert [m["role"] for m in merged] == ["system", "user"]
    assert merged[0]["content"] == "You are a helpful assistant.\n\nAnswer in one word."
    # Direct, the proxy's one resend after the refusal, and the key tried.
    assert len(document["fake"].requests) == len(NAMES) + 2
    assert document["exit"] == 0


def test_a_clean_upstream_sends_two_system_messages_unmerged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = doctor_json(upstreams.OPENAI, capsys)
    sent = next(r for r in document["fake"].requests if r["messages"][-1]["role"] == "system")
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system"]
    assert "system_messages" not in document["config"]["upstream"]


def test_stream_options_refused_is_learned_and_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.REJECTS_STREAM_OPTIONS, capsys)
    assert verdicts(document) == dict.fromkeys(NAMES, "fine") | {"include_usage": "fixed"}
    usage = row(document, "include_usage")
    assert (
        usage["observed"] == "rejected: 400 Unrecognized request argument supplied: stream_options"
    )
    assert "stream_options" in usage["breaks"]
    # The learned-parameter fallback sent it once more without the parameter; the client then
    # gets an answer, still without usage (said, not counted against the verdict).
    assert usage["streamfix"].startswith("parameter_learned x1")
    assert "no usage reported" in usage["streamfix"]
    asked = [
        r
        for r in document["fake"].requests
        if r["messages"][0]["content"].endswith("hi in one word.")
    ]
    assert ["stream_options" in r for r in asked] == [True, False]
    assert document["exit"] == 0


def test_no_usage_is_said_on_a_fine_row(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.NO_USAGE, capsys)
    assert verdicts(document) == dict.fromkeys(NAMES, "fine")
    usage = row(document, "include_usage")
    assert usage["observed"] == "no usage reported, though the request asked for it"
    assert usage["breaks"] == "clients that show token counts get none"
    assert document["exit"] == 0
    clean = doctor_json(upstreams.OPENAI, capsys)
    assert row(clean, "include_usage")["observed"] == "as OpenAI sends it"
    assert row(clean, "tiny_max_tokens")["observed"] == "as OpenAI sends it"


def test_a_cut_answer_reported_as_stop(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.CUT_STOP, capsys)
    assert verdicts(document) == {**dict.fromkeys(NAMES, "fine"), "tiny_max_tokens": "not_fixable"}
    cut = row(document, "tiny_max_tokens")
    assert cut["observed"] == "a cut answer (max_tokens 1) reported as 'stop', not 'length'"
    assert cut["breaks"] == (
        "clients cannot tell a cut answer from a whole one; agents treat it as done"
    )
    # The proxy never guesses `length`: the client gets the same.
    assert cut["streamfix"] == "nothing to do; the client still gets the same"
    assert document["exit"] == 1


def test_a_cut_answer_without_a_finish(capsys: pytest.CaptureFixture[str]) -> None:
    document = doctor_json(upstreams.CUT_UNFINISHED, capsys)
    assert verdicts(document)["tiny_max_tokens"] == "not_fixable"
    cut = row(document, "tiny_max_tokens")
    assert "a cut answer (max_tokens 1) with no finish reason" in cut["observed"]
    assert "ended without a finish reason" in cut["breaks"]
    # FinishReasonRepair supplies the missing finish, as "stop" (the stream ended cleanly):
    # the stream is whole, the cut still hidden.
    assert cut["streamfix"] == (
        "finish_reason_added x1; the client still gets "
        "a cut answer (max_tokens 1) reported as 'stop', not 'length'"
    )


def test_a_key_that_does_not_fix_the_refusal_is_not_suggested(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = doctor_json(upstreams.VLLM_GEMMA, capsys)
    assert verdicts(document)["two_system_messages"] == "not_fixable"
    two = row(document, "two_system_messages")
    assert two["observed"] == "rejected: 400 System role not supported"
    # Merged, the one system message left is still refused: tried, said, and not suggested.
    assert two["streamfix"].endswith(
        'with system_messages = "merged": rejected: 400 System role not supported'
    )
    assert "system_messages" not in document["config"]["upstream"]
    assert len(document["fake"].requests) == len(NAMES) + 1
