"""What the proxy learns from an upstream: the refusals it reads (and the one resend each
calls for), the answers that show a fact, and the memory that keeps both per upstream and model."""
