"""Krea's context recipe: every block rebuilds the KV cache from a few clean committed frames (docs/design.md §2.3).

What the published SDVG system runs (krea-ai/realtime-video release_server.py defaults): before each block
b >= 1 the model's cache is rebuilt by one clean forward over 3 context latent frames (for b >= 2 the first
is an anchor made by re-encoding the oldest kept decoded pixel frame), the window is 6 frames, RoPE positions
are relative to the window, and a block is denoised by 5 calls ending near t = 0 with no commit forward.
The cost per block is flat: nothing grows with the block index, so the recipe runs for any length.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...models.wan import CausalWan, KVCache
from ...given.latents import GivenEncoding
from ...derived.keys import AnchorKey
from ...derived.memo import Hold
from ...sampling.timesteps import StepPlan, krea_plan, krea_strength_plan, timestep_tensor
from ..state import GenerationSpec, GenerationState
from ...derived.tally import Tally
from .base import ContextHost

SHARED_ANCHOR = Hold("anchor:shared")  # one anchor per history, whichever model's context makes it first


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
    supports_prompt_switch = True

    @property
    def plan(self) -> StepPlan:
        return krea_plan(self.num_steps)

    def strength_plan(self, strength: float) -> StepPlan:
        """Video-to-video: linspace(1000 s, 0, steps) truncated and warped, all calls (v2v.py; docs/pixels.md §3)."""
        return krea_strength_plan(strength, self.num_steps)

    @property
    def given_encoding(self) -> GivenEncoding:
        """A start image repeated into `context_frames` latents, an extension encoded whole (setup_start_frame /
        resume_latents); the output begins with the given pixels as read (the decoder starts at block 0)."""
        return GivenEncoding("krea", self.context_frames, decodes_given=False)

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        """Latent frames the KV buffer must hold: context + the new block (6 = 9360 tokens at 832x480)."""
        return self.context_frames + frames_per_block

    def query_frames(self, frames_per_block: int) -> int:
        """A denoising call sees a block; a rebuild runs all context frames in one call."""
        return max(frames_per_block, self.context_frames)

    def pixel_history(self, temporal_compression: int) -> int:
        """Decoded frames the server keeps for the anchor: 1 + (context - 1) * 4 = 9 (0 without an anchor)."""
        return 1 + (self.context_frames - 1) * temporal_compression if self.anchor else 0

    def validate(self, spec: GenerationSpec) -> None:
        if self.context_frames < 1:
            raise ValueError(f"Krea recipe needs at least 1 context frame, got {self.context_frames}")

    def context_forwards(self, num_blocks: int, switches: int = 0) -> int:
        """Context forwards one model makes in a run where it generates every block: a rebuild per block b >= 1
        (a prompt switch adds none: the rebuild already runs under the block's own prompt)."""
        return max(num_blocks - 1, 0)

    def context(self, host: ContextHost, role: str, dit: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """The KV cache `dit` needs to generate block b, and the block's RoPE frame offset (window-relative)."""
        spec = state.spec
        layout = (self.window_frames(spec.frames_per_block, spec.num_latent_frames), 0, "baked")
        given = host.given_latents(state, self)  # start image / extension latents, or None
        if b == 0 and given is None:
            return host.run_kv(dit, self, spec, layout), 0

        def rebuild(empty: KVCache, part: Tally) -> KVCache:  # into the run's buffer (a re-run restores the memo's)
            ctx = self._context_latents(host, state, b, part, dit.device, given)  # [1, ctx, C, h, w]
            host.trace(f"{role}/block{b}/context", ctx)
            kv = host.context_forward(role, dit, ctx, timestep_tensor(0.0, 1, ctx.shape[1]), state, 0, empty, part)
            if host.tracing:
                host.trace_kv(f"{role}/block{b}/recompute/kv", kv)
            return kv

        return host.rebuilt_kv(role, dit, self, state, b, tally, layout, rebuild), self.context_frames

    def _context_latents(self, host: ContextHost, state: GenerationState, b: int, tally: Tally,
                         device: torch.device, given: torch.Tensor | None = None) -> torch.Tensor:
        """Context latents [1, ctx, C, h, w] on `device`: frame 0 (latent 0 or the anchor) + the newest ctx-1 frames.
        With given latents (start image / extension) the video's latents are the given ones then the committed
        ones: block 0 rebuilds from the given frames, frame 0 is the first given latent until the anchor takes over
        (release_server get_clean_context_frames), the anchor comes from the generated frames' decode."""
        n = self.context_frames
        g = 0 if given is None else given.shape[1]
        end = state.spec.frames_before(b)  # latent frames committed before block b

        def frames(start: int, stop: int) -> torch.Tensor:  # video latent frames [start, stop): given, then committed
            parts = ([given[:, start:min(stop, g)]] if start < g else []) + \
                    ([state.latent_frames(max(start - g, 0), stop - g)] if stop > g else [])
            return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

        newest = frames(max(g + end - (n - 1), min(1, g)), g + end)  # only the frames it needs: flat cost per block
        if end <= n or not self.anchor:
            first = frames(0, 1) if end <= n else frames(g + end - n, g + end - n + 1)
        else:
            first = self._anchor(host, state, b, tally)
        return torch.cat([first.to(device), newest.to(device)], dim=1)

    def _anchor(self, host: ContextHost, state: GenerationState, b: int, tally: Tally) -> torch.Tensor:
        """The oldest kept decoded pixel frame, re-encoded -> [1, 1, C, h, w] (memoised by history)."""
        def encode(part: Tally) -> torch.Tensor:
            spec = state.spec
            g = host.pixels_before(b, state) - self.pixel_history(host.temporal_compression)  # oldest kept frame
            frame = host.pixel_frame(state, g, part)  # [1, 3, H, W]
            host.trace(f"block{b}/anchor/pixel_frame", frame)
            anchor = host.encode_frame(frame, spec, part)
            host.trace(f"block{b}/anchor/latent", anchor)
            return anchor

        # the drafter's and the target's contexts of block b share it: held for the block, whatever the budget
        key = AnchorKey(host.vae_key, host.decode_rule, self, state.lineage_at(b))
        return host.memoised(key, "anchor", tally, encode, hold=SHARED_ANCHOR)
