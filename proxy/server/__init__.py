"""The server: the ASGI app and its routes, the client side of every exchange (auth, limits, errors, logs, metrics) and the responses it sends."""
