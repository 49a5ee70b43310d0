"""How much work a routing step does before the decision: the engine's own (lazy) or the reference's.

A work mode says what to compute for block b (`BlockWork`); `Engine.route` computes it. The engine computes only what
a decision needs (`LAZY`): a forced block is not drafted, a score-blind policy's drafts are not scored, and the
target's context is built only when the target generates. The reference SDVG implementation does more (`REFERENCE`,
EngineConfig(lazy=False)): it drafts every block when there is a drafter, scores every draft when there is a scorer
and rebuilds the target's context before every block (Krea). Both decide and commit alike, so outputs are
bit-identical; the reference's work is what the benchmarks compare with.
"""
from __future__ import annotations

from dataclasses import dataclass

from .policy import Policy


@dataclass(frozen=True)
class BlockWork:
    """What a routing step computes for one block before its decision."""

    draft: bool  # the drafter proposes the block
    score: bool  # the draft is decoded and scored (scores memoised by an earlier pass come without a decode)
    target_context: bool  # the target's context is built before the decision, whether the target runs or not


@dataclass(frozen=True)
class LazyWork:
    """Compute only what the decision needs."""

    def block_work(self, policy: Policy, b: int, has_drafter: bool, has_scorer: bool,
                   target_rebuilds: bool) -> BlockWork:
        if policy.forced(b):
            return BlockWork(draft=False, score=False, target_context=False)
        return BlockWork(draft=True, score=policy.needs_score(b), target_context=False)


@dataclass(frozen=True)
class ReferenceWork:
    """The reference SDVG loop's work, for comparison (EngineConfig(lazy=False))."""

    def block_work(self, policy: Policy, b: int, has_drafter: bool, has_scorer: bool,
                   target_rebuilds: bool) -> BlockWork:
        draft = has_drafter or not policy.forced(b)
        return BlockWork(draft=draft, score=draft and (policy.needs_score(b) or has_scorer),
                         target_context=b > 0 and target_rebuilds)


LAZY, REFERENCE = LazyWork(), ReferenceWork()
