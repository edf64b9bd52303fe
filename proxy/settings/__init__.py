"""Configuration: the frozen settings, how they are read from a TOML file, the environment
and flags, and how they are shown with secrets masked."""
