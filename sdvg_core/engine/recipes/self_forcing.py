"""Self-Forcing's context recipe: one KV cache appended block by block, absolute RoPE, a clean commit forward per block.

guandeh17/Self-Forcing pipeline/causal_inference.py: 4 warped steps, then a clean forward at t = 0 writes the
block's keys/values into the cache (made lazily here, when the next block needs them). Causal Forcing's
chunk-wise model runs the same inference bit for bit (docs/design.md §2.3). The cache is LongLive's with no sink
and, by default, a window of the whole video (append_cache.py); a prompt switch recaches every generated frame.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..state import GenerationSpec
from .append_cache import AppendCacheRecipe, CacheRule


@dataclass(frozen=True)
class SelfForcingRecipe(AppendCacheRecipe):
    """Self-Forcing causal inference (guandeh17/Self-Forcing pipeline/causal_inference.py)."""

    window: int | None = None  # latent frames kept in the cache (a rolling window, no sink); None = the whole video
    name: str = "self_forcing"

    def rule(self) -> CacheRule:
        return CacheRule(self.window)

    def validate(self, spec: GenerationSpec) -> None:
        if self.window is not None and self.window < spec.frames_per_block:
            raise ValueError(f"KV window of {self.window} frames cannot hold a block of {spec.frames_per_block}")
