"""How much work a routing step does before the decision: the engine's own (lazy) or the reference's.

The engine computes only what a decision needs (`LAZY`): a forced block is not drafted, a score-blind policy's
drafts are not scored, and the target's context is built only when the target generates. The reference SDVG
implementation does more (`REFERENCE`, EngineConfig(lazy=False)): it drafts every block when there is a drafter,
scores every draft when there is a scorer and rebuilds the target's context before every block (Krea). Both decide
and commit alike, so outputs are bit-identical; the reference's work is what the benchmarks compare with.
"""
from __future__ import annotations

from typing import Protocol

from ..models.kv_cache import KVCache
from ..models.wan import CausalWan
from .policy import Policy
from .recipes import Recipe
from .state import GenerationState
from .tally import Tally


class Operations(Protocol):
    """What a work mode composes: the engine's models, recipes and operations."""

    target: CausalWan
    drafter: CausalWan | None
    scorer: object | None
    recipes: dict[str, Recipe]
    services: object  # the recipes' ContextHost

    def draft(self, state: GenerationState) -> GenerationState: ...

    def scored(self, state: GenerationState) -> tuple[GenerationState, bool]: ...


class WorkMode(Protocol):
    def prepare(self, engine: Operations, state: GenerationState, policy: Policy) -> tuple[GenerationState, bool]:
        """The state with the pending block the decision reads (drafted, decoded, scored as this mode does), and
        whether scores memoised by an earlier pass came without decoding the draft."""

    def target_context(self, engine: Operations, state: GenerationState, b: int,
                       tally: Tally) -> tuple[KVCache, int] | None:
        """The target's context for block b built ahead of the decision (None: built only if the target runs)."""


class LazyWork:
    """Compute only what the decision needs."""

    def prepare(self, engine: Operations, state: GenerationState, policy: Policy) -> tuple[GenerationState, bool]:
        b = state.next_block
        if policy.forced(b):
            return state, False
        if state.pending is None:
            state = engine.draft(state)
        return engine.scored(state) if policy.needs_score(b) else (state, False)

    def target_context(self, engine: Operations, state: GenerationState, b: int,
                       tally: Tally) -> tuple[KVCache, int] | None:
        return None


class ReferenceWork:
    """The reference SDVG loop's work, for comparison (EngineConfig(lazy=False))."""

    def prepare(self, engine: Operations, state: GenerationState, policy: Policy) -> tuple[GenerationState, bool]:
        b = state.next_block
        if policy.forced(b) and engine.drafter is None:
            return state, False
        if state.pending is None:
            state = engine.draft(state)
        return engine.scored(state) if policy.needs_score(b) or engine.scorer is not None else (state, False)

    def target_context(self, engine: Operations, state: GenerationState, b: int,
                       tally: Tally) -> tuple[KVCache, int] | None:
        recipe = engine.recipes["target"]
        if b == 0 or not recipe.rebuilds_context_every_block:
            return None
        with tally.phase("context"):  # the reference builds the target's context whether it is used or not
            return recipe.context(engine.services, "target", engine.target, state, b, tally)


LAZY, REFERENCE = LazyWork(), ReferenceWork()
