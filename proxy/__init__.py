"""streamfix: a reverse proxy that repairs OpenAI-compatible chat streams in flight."""

__version__ = "0.1.0"
