"""One line of a sweep's summary table (a config's means over its rows): what the summary, the plot and the
equal-cost comparison read."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigSummary:
    """One table line: means over the config's rows."""

    config: str
    kind: str
    value: float | None
    rows: int
    metrics: dict[str, float]
    seconds: float
    all_fresh: bool  # every row's time was a fresh run's (nothing reused from the shared memo)
    speedup_measured: float | None
    speedup_counted: float
    acceptance: float | None
