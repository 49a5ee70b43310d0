"""Context recipes: how a block's KV cache is made from the committed history (DESIGN.md §2).

- Krea (what the published SDVG runs): every block rebuilds the cache from 3 clean context latent frames
  (for b >= 2 the first is an anchor re-encoded from a decoded pixel frame), attention window 6 frames,
  RoPE positions relative to the window, 5 calls ending near t = 0, no commit forward.
- Self-Forcing: one growing cache over the whole video, absolute RoPE positions, 4 steps, then a clean
  forward at t = 0 commits the block's keys/values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .schedule import StepPlan, krea_plan, self_forcing_plan


@dataclass(frozen=True)
class KreaRecipe:
    """Krea realtime-video server loop (krea-ai/realtime-video release_server.py defaults)."""

    context_frames: int = 3  # kv_cache_num_frames
    num_steps: int = 5  # num_denoising_steps: 1000, 937.5, 833.3, 625 and a call at t = 0
    anchor: bool = True  # re-encode the oldest kept pixel frame as context frame 0 once it left the window
    name: str = "krea"

    @property
    def plan(self) -> StepPlan:
        return krea_plan(self.num_steps)

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        """Latent frames the KV buffer must hold: context + the new block (6 = 9360 tokens at 832x480)."""
        return self.context_frames + frames_per_block

    def pixel_history(self, temporal_compression: int) -> int:
        """Decoded frames the server keeps for the anchor: 1 + (context - 1) * 4 = 9."""
        return 1 + (self.context_frames - 1) * temporal_compression


@dataclass(frozen=True)
class SelfForcingRecipe:
    """Self-Forcing causal inference (guandeh17/Self-Forcing pipeline/causal_inference.py)."""

    window: int | None = None  # latent frames kept in the cache; None = the whole video (global attention)
    name: str = "self_forcing"

    @property
    def plan(self) -> StepPlan:
        return self_forcing_plan()

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        return self.window if self.window is not None else num_latent_frames


Recipe = Union[KreaRecipe, SelfForcingRecipe]


def recipe_by_name(name: str) -> Recipe:
    if name == "krea":
        return KreaRecipe()
    if name in ("self_forcing", "self-forcing"):
        return SelfForcingRecipe()
    raise ValueError(f"unknown context recipe {name!r}; use 'krea' (published SDVG) or 'self_forcing'")
