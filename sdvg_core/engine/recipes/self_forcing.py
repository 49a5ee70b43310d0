"""Self-Forcing's context recipe: one growing KV cache, absolute RoPE, a clean commit forward per block.

guandeh17/Self-Forcing pipeline/causal_inference.py: 4 warped steps, then a clean forward at t = 0 writes the
block's keys/values into the cache (made lazily here, when the next block needs them). Causal Forcing's
chunk-wise model runs the same inference bit for bit (docs/design.md §2.3).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...models.wan import CausalWan, KVCache
from ..schedule import StepPlan, self_forcing_plan, timestep_tensor
from ..state import GenerationSpec, GenerationState
from ..tally import Tally
from .base import ContextHost


@dataclass(frozen=True)
class SelfForcingRecipe:
    """Self-Forcing causal inference (guandeh17/Self-Forcing pipeline/causal_inference.py)."""

    window: int | None = None  # latent frames kept in the cache; None = the whole video (global attention)
    name: str = "self_forcing"

    rebuilds_context_every_block = False
    has_reference_sdvg = False

    @property
    def plan(self) -> StepPlan:
        return self_forcing_plan()

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        return self.window if self.window is not None else num_latent_frames

    def query_frames(self, frames_per_block: int) -> int:
        return frames_per_block

    def pixel_history(self, temporal_compression: int) -> int:
        return 0

    def validate(self, spec: GenerationSpec) -> None:
        if self.window is not None and self.window < spec.frames_per_block:
            raise ValueError(f"KV window of {self.window} frames cannot hold a block of {spec.frames_per_block}")

    def context_forwards(self, num_blocks: int) -> int:
        """One clean commit forward per block but the last (commits are made when the next block needs them)."""
        return max(num_blocks - 1, 0)

    def context(self, host: ContextHost, role: str, runner: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """Extend the newest memoised prefix with clean t = 0 forwards of the missing blocks; absolute RoPE."""
        F = state.spec.frames_per_block
        j, cached = b, None  # cached: (kv after block j-1's commit, the cost of that commit)
        while j > 0 and (cached := host.memo.get(host.kv_key(runner, self, state, j))) is None:
            j -= 1
        window = self.window_frames(F, state.spec.num_latent_frames)
        kv = cached[0] if cached is not None else host.empty_kv(runner, state.spec, window)
        if j == b and b > 0:
            key = host.kv_key(runner, self, state, b)
            tally.reuse(f"{role}_kv", host.memo.origin(key))
            tally.credit_entry(key, cached[1])  # a fresh run commits b-1 for block b
        for k in range(j, b):
            before = dict(tally.cost)
            kv = host.context_forward(role, runner, state.blocks[k].latents, timestep_tensor(0.0, 1, F), state,
                                      k * F, kv, tally, text_block=k)
            # the newest prefix is held for the generation so a sequential run never rebuilds from the start
            key = host.kv_key(runner, self, state, k + 1)
            host.hold(role, "kv", key, (kv, tally.cost_since(before)))
            tally.computed(key)
        return kv, b * F
