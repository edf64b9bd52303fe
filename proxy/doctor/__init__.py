"""`streamfix doctor`: probe an upstream with a small battery, name its quirks, show what the
proxy makes of each answer, and print the configuration that suits it."""
