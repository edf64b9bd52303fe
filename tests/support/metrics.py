"""Reading one sample of the proxy's Prometheus text."""

from __future__ import annotations


def metric(text: str, name: str, **labels: str) -> float:
    """The sample of `name` with exactly these labels, in the order the metric declares them
    (0.0 when there is none: a counter nobody incremented has no sample yet)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{wanted}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
