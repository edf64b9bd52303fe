"""Configuration: the frozen settings, how they are read from TOML, the environment and flags, and how they are shown."""
