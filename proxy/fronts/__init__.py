"""Fronts: other APIs' requests in, the chat core in the middle, their events out (FRONTS.md)."""
