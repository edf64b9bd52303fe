"""A content part no repair stands in for (proxy/learning/refused_parts.py): its refusal, in the
upstream's real words and in every error shape, is learned for the request that carries the
part; the seam never sends it again, remembers it, and recalls it for the next such request."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from proxy.learning.refusal_memory import RefusalMemory
from proxy.learning.refusals import NOTHING, RefusalLearning
from proxy.learning.refused_parts import FILE_PARTS, FILE_PARTS_LEARNED_KIND
from proxy.repair.rules import RouteRules
from proxy.store.memory_store import MemoryStore
from tests.learning.test_refusal_rules import google, openai, openrouter
from tests.learning.test_refusals import Upstream, outgoing

PDF = {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JV"}}
WITH_FILE = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "sum up"}, PDF]},
    ],
}
WITHOUT = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}

# Each upstream's own words for a `file` part it cannot read.
TEXTS = [
    # DeepSeek (zotero-AI-Butler#316).
    "Failed to deserialize the JSON body into the target type: messages[1]: unknown variant "
    "`file`, expected `text` at line 1 column 1034",
    # vLLM's chat_utils.py now, and before (openwiki#63).
    "Unsupported chat content part type: 'file'. Supported types: audio_embeds, audio_url, "
    "image_embeds, image_pil, image_url, input_audio, input_image, input_text, output_text, "
    "prompt_embeds, refusal, text, thinking, tool_reference, video_url.",
    "Unknown part type: file",
]


@pytest.mark.parametrize("shape", [str, google, openai, openrouter])
@pytest.mark.parametrize("text", TEXTS)
def test_each_upstreams_words_name_the_file_part_in_every_shape(shape: Any, text: str) -> None:
    assert FILE_PARTS.detect(shape(text), WITH_FILE) == ("refused:file_parts",)
    assert FILE_PARTS.detect(shape(text), WITHOUT) == ()
    assert FILE_PARTS.places(WITH_FILE) == ["messages[1].content[1]"]


def test_other_refusals_of_a_request_with_a_file_part_are_not_its() -> None:
    for text in (
        "Invalid file data: 'messages[1].content[1].file.file_data'. Expected a base64-encoded "
        "data URL with an application/pdf MIME type",
        "unknown variant `image_url`, expected `text`",
        "Unknown part type: filet",
    ):
        assert FILE_PARTS.detect(openai(text), WITH_FILE) == (), text


def test_the_message_names_the_place_the_model_and_what_to_do() -> None:
    said = FILE_PARTS.message(["messages.0.content.1"], "deepseek-v4-flash", "no", "a `document`")
    assert said.startswith("messages.0.content.1: a `document` goes to a chat upstream as a")
    assert "'deepseek-v4-flash' (it answered: no)" in said and "reads PDFs" in said
    again = FILE_PARTS.message(["messages[1].content[1]"], "m", None)
    assert "nothing was sent upstream this time" in again and "a text part" in again


async def test_the_seam_remembers_it_never_resends_and_recalls_it_for_the_next() -> None:
    seam = RefusalLearning(RefusalMemory(MemoryStore(100, 60.0), 60.0))
    refused = httpx.Response(400, content=openai(TEXTS[0]).encode())
    upstream = Upstream(refused)
    body = orjson.loads(orjson.dumps(WITH_FILE))
    response, learned = await seam.send(upstream, "up", body, outgoing(body), RouteRules())
    assert response.status_code == 400 and len(upstream.bodies) == 1  # never sent again
    assert orjson.loads(await response.aread()) == orjson.loads(openai(TEXTS[0]))
    assert learned is not None and learned.kind == FILE_PARTS_LEARNED_KIND
    assert learned.keys == ("refused:file_parts",)
    recalled = await seam.recall("up", WITH_FILE)
    assert recalled.refused_part is FILE_PARTS
    assert recalled.applied(RouteRules()) == RouteRules()  # nothing about the request changes
    assert await seam.recall("up", WITHOUT) == NOTHING
    assert (await seam.recall("up", {**WITH_FILE, "model": "other"})).refused_part is None
