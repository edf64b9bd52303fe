"""The formats every room reads and writes: JSON with exact integers, JSON field paths, Server-Sent Events, credentials' places in a request, and the one limit error."""
