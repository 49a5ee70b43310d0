"""Context recipes: how a model's KV context for block b is made from the committed history (docs/design.md §2.3).

A recipe owns its context rule end to end: which committed frames (or re-encoded pixels) go in, which RoPE
positions they get, how big the KV window is, what it costs and how it is memoised. The engine only asks
`recipe.context(host, role, runner, state, b, tally)`. A new recipe is one new class with these members.

- Krea (what the published SDVG runs): every block rebuilds the cache from 3 clean context latent frames
  (for b >= 2 the first is an anchor re-encoded from a decoded pixel frame), attention window 6 frames,
  RoPE positions relative to the window, 5 calls ending near t = 0, no commit forward.
- Self-Forcing: one growing cache over the whole video, absolute RoPE positions, 4 steps, then a clean
  forward at t = 0 commits the block's keys/values (made lazily, when the next block needs them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union

import torch

from ..models.wan import CausalWan, KVCache
from .keys import AnchorKey, KVKey
from .schedule import StepPlan, krea_plan, self_forcing_plan, timestep_tensor
from .state import GenerationSpec, GenerationState
from .tally import Tally


class ContextHost(Protocol):
    """What a recipe may use from the engine: the memo, model calls, pixels and tracing."""

    memo: object
    vae_key: str
    decode_rule: str
    temporal_compression: int  # pixel frames per latent frame after the first (4 for Wan 2.1)
    tracing: bool

    def kv_key(self, runner: CausalWan, recipe: "Recipe", state: GenerationState, b: int) -> KVKey: ...

    def empty_kv(self, runner: CausalWan, spec: GenerationSpec) -> KVCache: ...

    def context_forward(self, role: str, runner: CausalWan, latents: torch.Tensor, t: torch.Tensor,
                        state: GenerationState, frame_offset: int, kv: KVCache, tally: Tally) -> KVCache:
        """One clean forward that writes `latents` [1, F, C, h, w] into `kv` and returns the committed view."""

    def pixels_before(self, b: int, spec: GenerationSpec) -> int: ...

    def pixel_frame(self, state: GenerationState, g: int, tally: Tally) -> torch.Tensor:
        """Committed decoded pixel frame number g, [1, 3, H, W] in [-1, 1]."""

    def encode_frame(self, frame: torch.Tensor, spec: GenerationSpec, tally: Tally) -> torch.Tensor:
        """One pixel frame re-encoded by the VAE -> latent [1, 1, C, h, w] float32."""

    def trace(self, name: str, t: torch.Tensor) -> None: ...

    def trace_kv(self, name: str, kv: KVCache, extra: int = 0) -> None: ...


@dataclass(frozen=True)
class KreaRecipe:
    """Krea realtime-video server loop (krea-ai/realtime-video release_server.py defaults)."""

    context_frames: int = 3  # kv_cache_num_frames
    num_steps: int = 5  # num_denoising_steps: 1000, 937.5, 833.3, 625 and a call at t = 0
    anchor: bool = True  # re-encode the oldest kept pixel frame as context frame 0 once it left the window
    name: str = "krea"

    # The reference SDVG loop rebuilds the target's context before every block, accepted or not.
    rebuilds_context_every_block = True
    has_reference_sdvg = True

    @property
    def plan(self) -> StepPlan:
        return krea_plan(self.num_steps)

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        """Latent frames the KV buffer must hold: context + the new block (6 = 9360 tokens at 832x480)."""
        return self.context_frames + frames_per_block

    def pixel_history(self, temporal_compression: int) -> int:
        """Decoded frames the server keeps for the anchor: 1 + (context - 1) * 4 = 9."""
        return 1 + (self.context_frames - 1) * temporal_compression

    def validate(self, spec: GenerationSpec) -> None:
        if self.context_frames < 1:
            raise ValueError(f"Krea recipe needs at least 1 context frame, got {self.context_frames}")

    def context_forwards(self, num_blocks: int) -> int:
        """Context forwards one model makes in a run where it generates every block: a rebuild per block b >= 1."""
        return max(num_blocks - 1, 0)

    def context(self, host: ContextHost, role: str, runner: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """The KV cache `runner` needs to generate block b, and the block's RoPE frame offset (window-relative)."""
        if b == 0:
            return host.empty_kv(runner, state.spec), 0
        key = host.kv_key(runner, self, state, b)
        cached = host.memo.get(key)  # (kv, the cost of building it)
        if cached is not None:
            tally.reused.append(f"{role}_kv")
            tally.credit_entry(key, cached[1])
            return cached[0], self.context_frames
        before = dict(tally.cost)
        ctx = self._context_latents(host, state, b, tally)  # [1, ctx, C, h, w]
        host.trace(f"{role}/block{b}/context", ctx)
        kv = host.context_forward(role, runner, ctx, torch.zeros(1, ctx.shape[1]), state, 0,
                                  host.empty_kv(runner, state.spec), tally)
        if host.tracing:
            host.trace_kv(f"{role}/block{b}/recompute/kv", kv)
        host.memo.put(key, (kv, tally.cost_since(before)))
        tally.computed(key)
        return kv, self.context_frames

    def _context_latents(self, host: ContextHost, state: GenerationState, b: int, tally: Tally) -> torch.Tensor:
        """Context latents [1, ctx, C, h, w]: frame 0 (latent 0 or the anchor) + the newest ctx-1 frames."""
        n = self.context_frames
        latents = state.committed_latents()[:, : b * state.spec.frames_per_block]
        if latents.shape[1] <= n or not self.anchor:
            first = latents[:, :1] if latents.shape[1] <= n else latents[:, -n:-n + 1]
        else:
            first = self._anchor(host, state, b, tally)
        return torch.cat([first, latents[:, latents.shape[1] - (n - 1):]], dim=1)

    def _anchor(self, host: ContextHost, state: GenerationState, b: int, tally: Tally) -> torch.Tensor:
        """The oldest kept decoded pixel frame, re-encoded -> [1, 1, C, h, w] (memoised by history)."""
        key = AnchorKey(host.vae_key, host.decode_rule, self, state.lineage_at(b))
        cached = host.memo.get(key)  # (anchor, the cost of making it)
        if cached is not None:
            tally.reused.append("anchor")
            tally.credit_entry(key, cached[1])
            return cached[0]
        before = dict(tally.cost)
        spec = state.spec
        g = host.pixels_before(b, spec) - self.pixel_history(host.temporal_compression)  # oldest kept frame
        frame = host.pixel_frame(state, g, tally)  # [1, 3, H, W]
        host.trace(f"block{b}/anchor/pixel_frame", frame)
        anchor = host.encode_frame(frame, spec, tally)
        host.trace(f"block{b}/anchor/latent", anchor)
        host.memo.put(key, (anchor, tally.cost_since(before)))
        tally.computed(key)
        return anchor


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
        kv = cached[0] if cached is not None else host.empty_kv(runner, state.spec)
        if j == b and b > 0:
            tally.reused.append(f"{role}_kv")
            tally.credit_entry(host.kv_key(runner, self, state, b), cached[1])  # a fresh run commits b-1 for block b
        for k in range(j, b):
            before = dict(tally.cost)
            kv = host.context_forward(role, runner, state.blocks[k].latents, timestep_tensor(0.0, 1, F), state,
                                      k * F, kv, tally)
            # the newest prefix is pinned so a sequential run never rebuilds from the start
            key = host.kv_key(runner, self, state, k + 1)
            host.memo.pin(f"kv_head:{key.model}", key, (kv, tally.cost_since(before)))
            tally.computed(key)
        return kv, b * F


Recipe = Union[KreaRecipe, SelfForcingRecipe]


def recipe_by_name(name: str) -> Recipe:
    if name == "krea":
        return KreaRecipe()
    if name in ("self_forcing", "self-forcing"):
        return SelfForcingRecipe()
    raise ValueError(f"unknown context recipe {name!r}; use 'krea' (published SDVG) or 'self_forcing'")
