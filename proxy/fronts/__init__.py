"""Fronts: other APIs in front of the chat-completions core (FRONTS.md). A front translates its
request into a chat request and the repaired chat stream back into its own events; it repairs
nothing itself."""
