"""The Responses API (`POST /v1/responses`) in front of chat-completions upstreams."""
