"""Anthropic's Messages API in front of chat-completions upstreams (issue 30)."""
