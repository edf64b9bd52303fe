"""Checkers (tests/support/refusing_upstream.py's `Checker`) that refuse content parts and
prompt-cache marks as real upstreams do, with their real error bodies (each cites its source);
the envelope around a quoted message is the upstream's usual one.

- `deepseek_parts`: DeepSeek's serde. A system, assistant or tool message takes its content
  only as a string ("messages[0]: invalid type: sequence, expected a string", litellm#6642,
  forgecode#2008), a user message text parts only ("unknown variant `file`, expected `text`",
  zotero-AI-Butler#316; `image_url` likewise, next-ai-draw-io#326). Marks it ignores, as serde
  ignores unknown fields.
- `groq_parts`: Groq's validator. A system message's content only as a string ("'messages.0' :
  for 'role:system' the following must be satisfied[('messages.0.content' : value must be a
  string)]", OpenHands#4643), and no mark anywhere ("property 'cache_control' is unsupported",
  alma-releases#59, where Cerebras says the same).
- `vllm_file_parts`: vLLM's chat_utils.py, for a `file` part ("Unsupported chat content part
  type: 'file'. Supported types: …", a 400 with param "type").
- `ttl_refused`: Anthropic's validator on Vertex, and Bedrock's older Claude models, behind a
  chat gateway that relays their words: a mark's `ttl` ("system.0.cache_control.ttl: Extra
  inputs are not permitted", pi#1570, tghamm/Anthropic.SDK#165).
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.refusing_upstream import JSON, Rejection

MARK = "cache_control"


def _openai_error(message: str, **fields: Any) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error", **fields}})


def _column(raw: bytes, index: int) -> int:
    """Roughly where serde stops: the offending message's place in the one-line body."""
    return raw.find(b'"role"', 0) + 40 * (index + 1)


def deepseek_parts(body: dict[str, Any], raw: bytes) -> Rejection | None:
    for index, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        where = f"Failed to deserialize the JSON body into the target type: messages[{index}]"
        at = f"at line 1 column {_column(raw, index)}"
        if message.get("role") != "user":
            said = f"{where}: invalid type: sequence, expected a string {at}"
            return 400, JSON, _openai_error(said, param=None, code="invalid_request_error")
        for part in content:
            if part.get("type") != "text":
                said = f"{where}: unknown variant `{part.get('type')}`, expected `text` {at}"
                return 400, JSON, _openai_error(said, param=None, code="invalid_request_error")
    return None


def _marked(holder: dict[str, Any]) -> bool:
    content = holder.get("content")
    parts = content if isinstance(content, list) else []
    return MARK in holder or any(isinstance(p, dict) and MARK in p for p in parts)


def groq_parts(body: dict[str, Any], raw: bytes) -> Rejection | None:
    for index, message in enumerate(body.get("messages", [])):
        role = message.get("role")
        where = f"'messages.{index}' : for 'role:{role}' the following must be satisfied"
        if role == "system" and not isinstance(message.get("content"), str):
            said = f"{where}[('messages.{index}.content' : value must be a string)]"
            return 400, JSON, _openai_error(said)
        if _marked(message):
            said = f"{where}[('messages.{index}' : property 'cache_control' is unsupported)]"
            return 400, JSON, _openai_error(said)
    for index, tool in enumerate(body.get("tools") or []):
        if MARK in tool:
            said = f"'tools.{index}' : property 'cache_control' is unsupported"
            return 400, JSON, _openai_error(said)
    return None


SUPPORTED_PARTS = (
    "audio_embeds, audio_url, image_embeds, image_pil, image_url, input_audio, input_image, "
    "input_text, output_text, prompt_embeds, refusal, text, thinking, tool_reference, video_url"
)


def vllm_file_parts(body: dict[str, Any], raw: bytes) -> Rejection | None:
    for message in body.get("messages", []):
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "file":
                said = (
                    f"Unsupported chat content part type: 'file'. Supported types: "
                    f"{SUPPORTED_PARTS}."
                )
                error = {"message": said, "type": "BadRequestError", "param": "type", "code": 400}
                return 400, JSON, orjson.dumps({"error": error})
    return None


def ttl_refused(body: dict[str, Any], raw: bytes) -> Rejection | None:
    for index, message in enumerate(body.get("messages", [])):
        content = message.get("content")
        marks = [(None, message.get(MARK))]
        marks += (
            [(at, p.get(MARK)) for at, p in enumerate(content)] if isinstance(content, list) else []
        )
        for at, mark in marks:
            if isinstance(mark, dict) and "ttl" in mark:
                place = "system" if message.get("role") == "system" else f"messages.{index}"
                where = f"{place}.{at}" if at is not None else place
                said = f"{where}.cache_control.ttl: Extra inputs are not permitted"
                return 400, JSON, _openai_error(said, param=None, code="400")
    return None
