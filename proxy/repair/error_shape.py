"""An upstream's refusal in the shape its chat clients read.

Google's OpenAI-compatible endpoints (Gemini's, Vertex's) answer an error as a JSON array
holding the error object, `[{"error": {"code": 400, "message": …, "status": …}}]`, where
OpenAI's clients read an object, `{"error": {"message": …}}`: the AI SDK's error schema fails
on the array and shows only the status text, openai-python prints the whole list as the
message. The object inside is already OpenAI's shape, so the array around it is all that is
broken, and all that is taken away (recordings/gemini_error_400_array.json). Any other body
goes on as the upstream sent it.
"""

from __future__ import annotations

from proxy.wire import json_codec

KIND = "error_body_unwrapped"


def unwrapped_error(body: bytes) -> bytes | None:
    """The error object of an error body that is a one-item JSON array around it, else None."""
    if body.lstrip()[:1] != b"[":
        return None
    try:
        document = json_codec.loads(body)
    except json_codec.JSONDecodeError:
        return None
    if not (isinstance(document, list) and len(document) == 1):
        return None
    error = document[0]
    if not (isinstance(error, dict) and isinstance(error.get("error"), dict)):
        return None
    return json_codec.dumps(error)
