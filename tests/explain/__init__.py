"""Tests of `streamfix explain` (proxy/explain/)."""
