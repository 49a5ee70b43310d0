"""Routing policies: decide per block whether the draft is kept or the target regenerates it.

A policy also says what its decision needs (a draft? a score?) so the engine computes nothing else.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

Aggregation = Literal["min", "mean"]
DEFAULT_TAU = -0.7  # SDVG paper operating point: 1.59x at 98% of target quality (docs/design.md §1)
# StrideAR's k in its published comparison with SDVG (its Hugging Face page, Statite/StrideAR: "SDVG, operating point
# for k=2"): the default of the command lines' and benchmarks' stride baseline
DEFAULT_STRIDE_K = 2


def aggregate(frame_scores: Sequence[float], how: Aggregation) -> float:
    """Block score from per-frame rewards: min (SDVG: one bad frame must not hide) or mean."""
    if not frame_scores:
        raise ValueError("no frame scores to aggregate")
    if how == "min":
        return min(frame_scores)
    if how == "mean":
        return sum(frame_scores) / len(frame_scores)
    raise ValueError(f"unknown aggregation {how!r}; use 'min' or 'mean'")


class Policy(Protocol):
    aggregation: Aggregation

    def describe(self) -> str: ...

    def forced(self, block: int) -> bool:
        """True when the block goes to the target without drafting."""

    def needs_score(self, block: int) -> bool:
        """True when `accept` looks at the score (otherwise the engine does not score)."""

    def accept(self, block: int, score: float | None) -> bool: ...

    @property
    def uses_drafter(self) -> bool:
        """Whether some block may be drafted (a run of this policy needs a drafter)."""

    @property
    def uses_scorer(self) -> bool:
        """Whether some decision reads a score (a run of this policy needs ImageReward)."""


@dataclass(frozen=True)
class ThresholdPolicy:
    """SDVG: accept the draft when its aggregated ImageReward score >= tau."""

    tau: float = DEFAULT_TAU
    aggregation: Aggregation = "min"
    force_reject_first: bool = True

    def __post_init__(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or math.isnan(self.tau):
            raise ValueError(f"tau must be a number (+/-inf allowed), got {self.tau!r}")
        aggregate([0.0], self.aggregation)

    def describe(self) -> str:
        return f"threshold tau={self.tau:g} ({self.aggregation} over frames{', block 0 forced to target' if self.force_reject_first else ''})"

    def forced(self, block: int) -> bool:
        return (self.force_reject_first and block == 0) or self.tau == math.inf

    def needs_score(self, block: int) -> bool:
        return not self.forced(block) and self.tau != -math.inf

    def accept(self, block: int, score: float | None) -> bool:
        if self.forced(block):
            return False
        if self.tau == -math.inf:
            return True
        return score is not None and score >= self.tau

    @property
    def uses_drafter(self) -> bool:
        return self.tau != math.inf

    @property
    def uses_scorer(self) -> bool:
        return math.isfinite(self.tau)


@dataclass(frozen=True)
class TargetOnly:
    """Baseline: the target makes every block; no drafting, no scoring."""

    aggregation: Aggregation = "min"

    def describe(self) -> str:
        return "target-only"

    def forced(self, block: int) -> bool:
        return True

    def needs_score(self, block: int) -> bool:
        return False

    def accept(self, block: int, score: float | None) -> bool:
        return False

    uses_drafter = uses_scorer = False


@dataclass(frozen=True)
class DraftOnly:
    """Baseline: keep every draft (with force_reject_first, block 0 still comes from the target)."""

    force_reject_first: bool = False
    aggregation: Aggregation = "min"

    def describe(self) -> str:
        return "draft-only" + (" (block 0 from the target)" if self.force_reject_first else "")

    def forced(self, block: int) -> bool:
        return self.force_reject_first and block == 0

    def needs_score(self, block: int) -> bool:
        return False

    def accept(self, block: int, score: float | None) -> bool:
        return not self.forced(block)

    uses_drafter, uses_scorer = True, False


@dataclass(frozen=True)
class RandomPolicy:
    """Ablation: accept each draft with probability `accept_rate`, seeded per block (score-blind)."""

    accept_rate: float
    seed: int = 0
    force_reject_first: bool = True
    aggregation: Aggregation = "min"

    def __post_init__(self):
        if not 0.0 <= self.accept_rate <= 1.0:
            raise ValueError(f"accept_rate must be in [0, 1], got {self.accept_rate}")

    def describe(self) -> str:
        return f"random accept {self.accept_rate:.0%} (seed {self.seed})"

    def forced(self, block: int) -> bool:
        return self.force_reject_first and block == 0

    def needs_score(self, block: int) -> bool:
        return False

    def accept(self, block: int, score: float | None) -> bool:
        if self.forced(block):
            return False
        return random.Random(f"{self.seed}:{block}").random() < self.accept_rate

    uses_drafter, uses_scorer = True, False


@dataclass(frozen=True)
class StridePolicy:
    """Baseline (StrideAR, published as SpecAR): the target makes every k-th block, block 0 included, the drafter
    the rest; no scorer, so nothing is decoded or scored for routing and a target block is never drafted.

    k=1 is target-only; k=2 alternates target, drafter, target... (docs/evaluation.md, "StrideAR").
    """

    k: int
    aggregation: Aggregation = "min"

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"stride k must be an integer >= 1 (the target makes blocks 0, k, 2k, ...; k=1 is "
                             f"target-only), got {self.k!r}")

    def describe(self) -> str:
        return (f"stride k={self.k} (StrideAR: the target makes blocks 0, {self.k}, {2 * self.k}, ..., the drafter "
                f"the rest; no scorer)")

    def forced(self, block: int) -> bool:
        return block % self.k == 0

    def needs_score(self, block: int) -> bool:
        return False

    def accept(self, block: int, score: float | None) -> bool:
        return block % self.k != 0  # every block the target does not make: the drafter's, whatever it looks like

    @property
    def uses_drafter(self) -> bool:
        return self.k > 1

    uses_scorer = False


@dataclass(frozen=True)
class FixedPattern:
    """Benchmark: a given accept/reject decision per block (e.g. the reference's ~73% acceptance).

    Rejected blocks are drafted first, as SDVG would; only a rejected block 0 skips the draft (forced).
    With `score_drafts` (default) every draft is also decoded and scored, so the work matches SDVG's.
    """

    decisions: tuple[bool, ...]  # True = accept the draft
    score_drafts: bool = True
    aggregation: Aggregation = "min"

    def describe(self) -> str:
        return "pattern " + "".join("A" if d else "R" for d in self.decisions)

    def forced(self, block: int) -> bool:
        return block == 0 and not self.decisions[0]

    def needs_score(self, block: int) -> bool:
        return self.score_drafts and not self.forced(block)

    def accept(self, block: int, score: float | None) -> bool:
        return self.decisions[block]

    uses_drafter = True

    @property
    def uses_scorer(self) -> bool:
        return self.score_drafts
