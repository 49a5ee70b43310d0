"""Per-run report: per-block scores, decisions and counted work; acceptance; counted-work speedup.

Forward counts are what each block costs in a fresh run (`BlockRecord.cost`: computed now or reused from
the memo); `recomputed_*` says what this particular run computed (less after a re-run at another tau).
Counted work is in drafter-forward units: a target forward costs `cost_ratio` drafter forwards (default
7.4, the 1.3B:14B ratio at 832x480, DESIGN.md §5). The target-only baseline of the same recipe is
counted, not run: Krea rebuilds the target cache before every block but the first (1 + steps per block),
Self-Forcing commits every block but the last with a clean forward.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .recipes import KreaRecipe, Recipe
from .state import GenerationState

DEFAULT_COST_RATIO = 7.4  # target (14B) forward / drafter (1.3B) forward at 832x480 (DESIGN.md §5)


@dataclass(frozen=True)
class BlockReport:
    index: int
    producer: str
    decision: str
    score: float | None
    frame_scores: list[float]
    work: dict[str, int]  # computed by this run
    cost: dict[str, int]  # the block's work in a fresh run
    seconds: dict[str, float]
    reused: list[str]


@dataclass(frozen=True)
class RunReport:
    policy: str
    recipe: str
    num_blocks: int
    blocks: list[BlockReport]
    acceptance_blocks_1_to_n: float | None  # accepted / (N-1) over blocks 1..N-1 (the paper's figure)
    acceptance_all_blocks: float  # accepted / N
    drafter_forwards: int  # fresh-run counts (the basis of the counted speedup)
    target_forwards: int
    recomputed_drafter_forwards: int  # what this run computed
    recomputed_target_forwards: int
    cost_ratio: float
    counted_cost: float  # drafter-forward units
    target_only_cost: float
    counted_speedup: float  # target_only_cost / counted_cost
    seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float | None = None
    meta: dict[str, str] = field(default_factory=dict)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(asdict(self), indent=indent)

    def table(self) -> str:
        """A fixed-width per-block table plus the totals, for terminals and ComfyUI text outputs."""
        lines = [f"policy: {self.policy} | recipe: {self.recipe}",
                 f"{'block':>5} {'producer':>8} {'decision':>8} {'min/agg':>8} {'frames(min..max)':>18} "
                 f"{'D fw':>4} {'T fw':>4} {'secs':>7} reused"]
        for b in self.blocks:
            fs = f"{min(b.frame_scores):+.3f}..{max(b.frame_scores):+.3f}" if b.frame_scores else "-"
            sc = f"{b.score:+.3f}" if b.score is not None else "-"
            lines.append(f"{b.index:>5} {b.producer:>8} {b.decision:>8} {sc:>8} {fs:>18} "
                         f"{b.cost.get('drafter_forwards', 0):>4} {b.cost.get('target_forwards', 0):>4} "
                         f"{sum(b.seconds.values()):>7.3f} {','.join(b.reused) or '-'}")
        acc = "-" if self.acceptance_blocks_1_to_n is None else f"{self.acceptance_blocks_1_to_n:.1%}"
        lines.append(f"acceptance blocks 1..N-1: {acc} | all N blocks: {self.acceptance_all_blocks:.1%}")
        lines.append(f"forwards: drafter {self.drafter_forwards}, target {self.target_forwards} | counted cost "
                     f"{self.counted_cost:.1f} vs target-only {self.target_only_cost:.1f} (1:{self.cost_ratio:g}) "
                     f"-> counted speedup {self.counted_speedup:.2f}x")
        if (self.recomputed_drafter_forwards, self.recomputed_target_forwards) != (self.drafter_forwards, self.target_forwards):
            lines.append(f"this run recomputed drafter {self.recomputed_drafter_forwards}, target "
                         f"{self.recomputed_target_forwards} forwards (the rest came from the cache)")
        if self.wall_seconds is not None:
            lines.append(f"wall {self.wall_seconds:.2f} s; phases " + ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items()))
        return "\n".join(lines)


def target_only_forwards(recipe: Recipe, num_blocks: int, steps: int) -> int:
    """Target forwards of the target-only baseline: the steps of every block plus one context forward per
    block after the first (Krea: a cache rebuild before it; Self-Forcing: the clean commit of the block
    before it, made lazily, so none follows the last block)."""
    return num_blocks * steps + (num_blocks - 1)


def reference_forwards(recipe: Recipe, rejected: list[bool], steps: int) -> tuple[int, int]:
    """(drafter, target) forwards of the reference SDVG loop (spec-video-gen) for a decision pattern.

    The reference drafts every block (block 0 too), rebuilds both caches before every block but the
    first, and runs the target's steps on every rejected block. Only the Krea recipe has a reference.
    """
    if not isinstance(recipe, KreaRecipe):
        raise ValueError("the reference SDVG implementation exists for the Krea recipe only")
    n = len(rejected)
    drafter = n * steps + (n - 1)
    target = (n - 1) + steps * sum(rejected)
    return drafter, target


def build_report(state: GenerationState, policy_desc: str, recipe: Recipe, steps: int,
                 cost_ratio: float = DEFAULT_COST_RATIO, wall_seconds: float | None = None,
                 meta: dict[str, str] | None = None) -> RunReport:
    blocks = [BlockReport(b.index, b.producer, b.decision, b.score, list(b.frame_scores), dict(b.work), dict(b.cost),
                          {k: round(v, 6) for k, v in b.seconds.items()}, list(b.reused)) for b in state.blocks]
    n = len(blocks)
    accepted = [b.decision == "accepted" for b in blocks]
    d_fw = sum(b.cost.get("drafter_forwards", 0) for b in blocks)
    t_fw = sum(b.cost.get("target_forwards", 0) for b in blocks)
    cost = d_fw + cost_ratio * t_fw
    base = cost_ratio * target_only_forwards(recipe, n, steps)
    seconds: dict[str, float] = {}
    for b in blocks:
        for k, v in b.seconds.items():
            seconds[k] = round(seconds.get(k, 0.0) + v, 6)
    return RunReport(
        policy=policy_desc, recipe=recipe.name, num_blocks=n, blocks=blocks,
        acceptance_blocks_1_to_n=(sum(accepted[1:]) / (n - 1)) if n > 1 else None,
        acceptance_all_blocks=sum(accepted) / n if n else 0.0,
        drafter_forwards=d_fw, target_forwards=t_fw,
        recomputed_drafter_forwards=sum(b.work.get("drafter_forwards", 0) for b in blocks),
        recomputed_target_forwards=sum(b.work.get("target_forwards", 0) for b in blocks),
        cost_ratio=cost_ratio, counted_cost=cost,
        target_only_cost=base, counted_speedup=base / cost if cost else float("inf"),
        seconds=seconds, wall_seconds=wall_seconds, meta=dict(meta or {}))
