"""The formats every room reads and writes: JSON with exact integers, JSON field paths,
Server-Sent Events, where a request carries a credential, and the one limit error."""
