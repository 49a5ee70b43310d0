"""The append-cache context rule shared by Self-Forcing and LongLive: one KV cache appended block by block.

Both denoise a block in Self-Forcing's 4 warped steps, then write the block's keys/values into the cache with one
clean forward at t = 0 (made lazily here, when the next block needs them), and recache at a prompt switch. They
differ only in the cache's shape: LongLive keeps a frame sink and a sliding window (a ring written in place,
models/kv_cache.py), optionally with slot-relative RoPE; Self-Forcing's cache is the same with no sink and a window
of the whole video. `AppendCacheRecipe` is that one rule, parametrised by `rule()`; self_forcing.py and
longlive.py name the parameters and their references.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...models.wan import CausalWan, KVCache
from ...given.latents import GivenEncoding
from ...sampling.timesteps import StepPlan, self_forcing_plan, self_forcing_strength_plan, timestep_tensor
from ..state import GenerationSpec, GenerationState
from ...derived.tally import Tally
from .base import ContextHost


@dataclass(frozen=True)
class CacheRule:
    """The shape of an append cache: `window` latent frames (None: the whole video), the first `sink` of them a
    sink; keys stored rotated (`rope` "baked") or rotated by slot at every call ("slot"); at a prompt switch,
    `keep_sink` keeps the sink's keys/values from before the switch (not recomputed)."""

    window: int | None
    sink: int = 0
    rope: str = "baked"
    keep_sink: bool = False


def prefix_groups(given_frames: int, frames_per_block: int) -> list[tuple[int, int]]:
    """How Self-Forcing's pipeline feeds given latents into the cache (causal_inference.py 136-169): a 1-frame start
    image alone (`independent_first_frame`), else one group per block (given latents come in whole blocks)."""
    if given_frames == 1:
        return [(0, 1)]
    if given_frames % frames_per_block:
        raise ValueError(f"Self-Forcing takes given latents in whole blocks of {frames_per_block}, got {given_frames}")
    return [(s, s + frames_per_block) for s in range(0, given_frames, frames_per_block)]


def prompt_switches_at(spec: GenerationSpec, b: int) -> bool:
    """Block b starts a new prompt (its prompt differs from block b-1's)."""
    return b > 0 and spec.prompt_at(b).key != spec.prompt_at(b - 1).key


class AppendCacheRecipe:
    """The members of `Recipe` for an append cache; a subclass (a frozen dataclass) gives `rule()`, `name` and its
    own `validate`."""

    rebuilds_context_every_block = False
    has_reference_sdvg = False
    supports_prompt_switch = True

    def rule(self) -> CacheRule:
        raise NotImplementedError

    @property
    def plan(self) -> StepPlan:
        """denoising_step_list [1000, 750, 500, 250], warped with shift 5, then the clean commit."""
        return self_forcing_plan()

    def strength_plan(self, strength: float) -> StepPlan:
        """Video-to-video: the trained steps from the first at most 1000 s, then the commit (docs/pixels.md §3)."""
        return self_forcing_strength_plan(strength, self.plan.schedule)

    @property
    def given_encoding(self) -> GivenEncoding:
        """Self-Forcing's `initial_latent`: a start image alone (1 latent), an extension's last whole blocks; the
        output decodes them before the generated blocks (the reference decodes its whole `output`)."""
        return GivenEncoding("initial_latent", decodes_given=True)

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        window = self.rule().window
        return window if window is not None else num_latent_frames

    def cache_layout(self, spec: GenerationSpec, given_frames: int = 0) -> tuple[int, int, str]:
        """(window frames, sink frames, RoPE mode) of the model's KV buffer (a whole-video cache holds the given
        latent frames too)."""
        rule = self.rule()
        return self.window_frames(spec.frames_per_block, spec.num_latent_frames + given_frames), rule.sink, rule.rope

    def query_frames(self, frames_per_block: int) -> int:
        """A block; with a window, a recache at a prompt switch runs up to the whole window in one call (a whole-video
        cache's recache runs every generated frame: not counted here)."""
        window = self.rule().window
        return frames_per_block if window is None else max(frames_per_block, window)

    def pixel_history(self, temporal_compression: int) -> int:
        return 0

    def context_forwards(self, num_blocks: int, switches: int = 0) -> int:
        """One clean commit forward per block but the last (commits are made when the next block needs them); each
        prompt switch adds one recache forward."""
        return max(num_blocks - 1, 0) + switches

    def context(self, host: ContextHost, role: str, dit: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """The view block b appends to: the newest memoised view of this history extended by clean t = 0 commit
        forwards of the blocks it lacks, each followed by a recache where the next block switches prompt; and the
        block's absolute frame offset (a slot-RoPE cache positions queries and keys by slot itself)."""
        spec = state.spec
        F = spec.frames_per_block
        given = host.given_latents(state, self)  # start image / extension latents, or None
        g = 0 if given is None else given.shape[1]

        def prefix(kv: KVCache, part: Tally) -> KVCache:
            """The given latents into the empty cache: one clean t = 0 call per group at their own positions
            (causal_inference.py: a 1-frame start image alone, an extension a block at a time)."""
            for s, e in prefix_groups(g, F):
                kv = host.context_forward(role, dit, given[:, s:e], timestep_tensor(0.0, 1, e - s), state, s, kv, part,
                                          text_block=0)
            if host.tracing:
                host.trace_kv(f"{role}/given/kv", kv, slot_frame=True)
            return kv

        def commit(k: int, kv: KVCache, part: Tally) -> KVCache:
            s, n = spec.block_start(k), spec.block_frames(k)  # block k's frames (every block but the last is whole)
            kv = host.context_forward(role, dit, state.latent_frames(s, s + n), timestep_tensor(0.0, 1, n),
                                      state, g + s, kv, part, text_block=k)
            if host.tracing:
                host.trace_kv(f"{role}/block{k}/commit/kv", kv, slot_frame=True)
            if prompt_switches_at(spec, k + 1):
                kv = self.recache(host, role, dit, state, k + 1, kv, part, given)
            return kv

        return host.extend_kv(role, dit, self, state, b, tally, self.cache_layout(spec, g), commit,
                              prefix=prefix if g else None), g + spec.frames_before(b)

    def recache(self, host: ContextHost, role: str, dit: CausalWan, state: GenerationState, b: int, kv: KVCache,
                tally: Tally, given: torch.Tensor | None = None) -> KVCache:
        """LongLive's KV recache before block b, the first of a new prompt (InteractiveCausalInferencePipeline.
        _recache_after_switch): one clean t = 0 forward under block b's prompt over the newest min(window, generated)
        generated latent frames, at their own positions, rewriting the cache in place without advancing it. With a
        kept sink (LongLive global_sink, and only when the recached frames do not start at frame 0) the sink slots
        keep the old prompt's keys and the frames that map onto them only query; otherwise the first recached frames
        become the sink. A cache without window (Self-Forcing) recaches every generated frame."""
        g = 0 if given is None else given.shape[1]  # given latents come first in the video (and the cache)
        end = g + state.spec.frames_before(b)
        n = kv.frames  # the cache holds min(window, end) frames: LongLive recaches min(local_attn_size, end)
        first = end - n
        plan = kv.rewrite(n, first, keep_sink=self.rule().keep_sink and first > 0)
        latents = state.latent_frames(max(first - g, 0), end - g)
        if first < g:
            latents = torch.cat([given[:, first:].to(latents), latents], dim=1)
        kv = host.context_forward(role, dit, latents, timestep_tensor(0.0, 1, n), state, first, plan, tally,
                                  text_block=b)
        if host.tracing:
            host.trace_kv(f"{role}/block{b}/recache/kv", kv, slot_frame=True)
        return kv
