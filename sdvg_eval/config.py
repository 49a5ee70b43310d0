"""Sweep configurations (`sdvg:-0.7`, `target-only`, ...) and the harness's constants, each with its source."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from sdvg_core.engine.policy import DraftOnly, Policy, RandomPolicy, StridePolicy, TargetOnly, ThresholdPolicy

# The paper's baselines and tau values (docs/design.md §1): target-only, draft-only, block 0 from the target
# + accept the rest, random routing at SDVG's ~73% acceptance, SDVG at tau -0.7 / -1.5, mean-over-frames.
PAPER_CONFIGS = ("target-only", "draft-only", "accept-all", "random:0.73", "sdvg:-0.7", "sdvg:-1.5", "sdvg-mean:-0.7")
BASELINE_KINDS = ("target-only", "draft-only", "accept-all", "random")
CURVE_KINDS = ("sdvg", "sdvg-mean")  # one curve per kind, one point per tau
# StrideAR (published as SpecAR): the target makes every k-th block, block 0 included, the drafter the rest, no scorer.
# Its own series on the Pareto plot (one point per k), compared with SDVG's tau curve at equal counted cost.
STRIDE_KIND = "stride"
SPEEDUP_BASELINE = "target-only"  # speedups are relative to this config (the paper's convention)
DEFAULT_SEEDS = (42,)  # the paper's seed (docs/design.md §1)
MAX_UNIT_RETRIES = 1  # a unit whose worker died is re-queued this many times before the run gives up on it
RESULTS_FILE = "rows.csv"  # one row per (config, prompt, seed)
UNITS_FILE = "units.csv"  # one row per (prompt, seed) unit: forwards computed vs a naive sweep
RUN_FILE = "run.json"  # the run's fingerprint (models, code, geometry, metrics): rows of another setup are refused
SUMMARY_FILE = "summary.md"
PLOT_FILE = "pareto.png"


@dataclass(frozen=True)
class SweepConfig:
    """One routing configuration of a sweep, parsed from its name (e.g. `sdvg:-0.7`)."""

    name: str
    kind: str  # target-only | draft-only | accept-all | random | sdvg | sdvg-mean | stride
    value: float | None = None  # tau (sdvg, sdvg-mean), the accept rate (random) or k (stride)

    @property
    def needs_drafter(self) -> bool:
        return self.kind != "target-only"

    @property
    def needs_scorer(self) -> bool:
        return self.kind in CURVE_KINDS and self.value != -math.inf

    def policy(self, prompt_id: int, seed: int) -> Policy:
        """The engine policy; `random` is seeded by (seed, prompt id) so every run of the sweep is reproducible."""
        if self.kind == "target-only":
            return TargetOnly()
        if self.kind == "draft-only":
            return DraftOnly()
        if self.kind == "accept-all":
            return DraftOnly(force_reject_first=True)
        if self.kind == "random":
            digest = hashlib.blake2b(f"{seed}:{prompt_id}".encode(), digest_size=8).digest()
            return RandomPolicy(self.value, seed=int.from_bytes(digest, "little"))
        if self.kind == STRIDE_KIND:
            return StridePolicy(int(self.value))
        return ThresholdPolicy(self.value, "min" if self.kind == "sdvg" else "mean")


def parse_config(name: str) -> SweepConfig:
    """`target-only` | `draft-only` | `accept-all` | `random:P` | `sdvg:TAU` | `sdvg-mean:TAU` | `stride:k=K` ->
    SweepConfig."""
    kind, _, arg = name.partition(":")
    if kind in ("target-only", "draft-only", "accept-all"):
        if arg:
            raise ValueError(f"config {name!r}: {kind} takes no value")
        return SweepConfig(name, kind)
    if kind == STRIDE_KIND:
        return SweepConfig(name, kind, float(stride_k(name, arg)))
    if kind not in ("random", *CURVE_KINDS):
        raise ValueError(f"unknown config {name!r}; use target-only, draft-only, accept-all, random:P, sdvg:TAU, "
                         f"sdvg-mean:TAU, stride:k=K")
    try:
        value = float(arg)
    except ValueError:
        raise ValueError(f"config {name!r}: {kind} needs a number after ':' (e.g. {kind}:-0.7)") from None
    if math.isnan(value):
        raise ValueError(f"config {name!r}: the value is not a number")
    if kind == "random" and not 0.0 <= value <= 1.0:
        raise ValueError(f"config {name!r}: the accept rate must be between 0 and 1")
    return SweepConfig(name, kind, value)


def stride_k(name: str, arg: str) -> int:
    """K of `stride:k=K`: an integer >= 1 (k=1 is target-only)."""
    key, eq, value = arg.partition("=")
    if key.strip() != "k" or not eq:
        raise ValueError(f"config {name!r}: write the stride as stride:k=K, e.g. stride:k=2 (the target makes blocks "
                         f"0, K, 2K, ..., the drafter the rest)")
    try:
        k = int(value)
    except ValueError:
        raise ValueError(f"config {name!r}: k must be a whole number of blocks, e.g. stride:k=2") from None
    if k < 1:
        raise ValueError(f"config {name!r}: k must be >= 1 (k=1: the target makes every block; k=2: every other "
                         f"block, block 0 included), got {k}")
    return k


def parse_configs(names: list[str]) -> list[SweepConfig]:
    """Parse and de-duplicate (order kept); target-only first so its measured times are fresh-run times."""
    out: dict[str, SweepConfig] = {}
    for n in names:
        c = parse_config(n)
        out.setdefault(c.name, c)
    return sorted(out.values(), key=lambda c: c.kind != "target-only")
