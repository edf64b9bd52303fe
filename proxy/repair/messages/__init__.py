"""Message rules: the shapes of `messages` one upstream accepts, and a request rewritten into them.

OpenAI's chat API takes a `developer` role, any number of system messages anywhere, a null or
empty content beside tool calls, tool results as text parts and any string as a call id. Some
upstreams take less and reject the whole request over one message. Each module here is one rule:
a class with `apply(messages) -> int` (the number of changes, counted under its `KIND`) that
edits the list in place and touches nothing when nothing needs it. Which rules apply is data
(`MessageRules` on the profile, overridable per route); MessageShapeRepair runs them in order.
"""
