"""A parameter the upstream refuses before generating (here `reasoning_effort`, mapped from the
Responses request's `reasoning.effort`, refused by Gemini's OpenAI endpoint with its real body)
is learned and the request sent once more without it, as for chat: the Responses client gets
its answer, not the 400."""

from __future__ import annotations

from tests.fronts.responses.responses_flows import client, one_response
from tests.support.proxies import running_proxy
from tests.support.rejecting_upstream import (
    RejectingUpstream,
    gemini_unknown_name,
    running_rejecting_upstream,
)


def test_a_refused_mapped_parameter_is_learned_and_the_request_resent() -> None:
    fake = RejectingUpstream({"reasoning_effort": gemini_unknown_name("reasoning_effort")})
    with running_rejecting_upstream(fake) as url, running_proxy(url) as proxy:
        sdk = client(f"{proxy}/v1")
        for stream in (True, False):
            response = one_response(
                sdk, stream, model="m", input="hi", reasoning={"effort": "high"}
            )
            text = response["output"][0]["content"][0]["text"]
            assert text == "hi"
    bodies = fake.bodies()
    assert "reasoning_effort" in bodies[0]
    assert all("reasoning_effort" not in body for body in bodies[1:])
