"""Dialects: what one upstream accepts of a request, and how a request is rewritten into it.

An upstream that speaks OpenAI's chat API may still accept only part of what OpenAI accepts.
The tool schemas (`tools[].function.parameters`) are the first case: Gemini takes a subset of
OpenAPI 3.0 and rejects the whole request over one keyword it does not know; Moonshot wants a
`type` on every node. Each dialect is a table of data (schemas.py); the rewrite keeps the
schema's meaning, moving what the dialect cannot say into the description the model reads.
"""
