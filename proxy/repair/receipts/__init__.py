"""Receipts: the provider metadata captured from a turn's stream, where it is kept, and how
it goes back on the next request."""
