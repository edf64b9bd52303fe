"""The client side of every exchange: the ASGI app and its routes, auth, limits, errors, logs,
metrics, the chat request reader, and the responses sent back."""
