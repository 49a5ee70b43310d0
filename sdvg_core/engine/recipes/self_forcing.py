"""Self-Forcing's context recipe: one KV cache appended block by block, absolute RoPE, a clean commit forward per block.

guandeh17/Self-Forcing pipeline/causal_inference.py: 4 warped steps, then a clean forward at t = 0 writes the
block's keys/values into the cache (made lazily here, when the next block needs them). Causal Forcing's
chunk-wise model runs the same inference bit for bit (docs/design.md §2.3). `append_cache_context` is the
machinery LongLive's recipe shares (longlive.py): the commit chain, the memo walk, and the recache at a prompt switch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...models.wan import CausalWan, KVCache
from ..schedule import StepPlan, self_forcing_plan, timestep_tensor
from ..state import GenerationSpec, GenerationState
from ..tally import Tally
from .base import ContextHost


class AppendCacheRule(Protocol):
    """What `append_cache_context` needs from a recipe whose cache is appended block by block."""

    def cache_layout(self, spec: GenerationSpec) -> tuple[int, int, str]:
        """(window frames, sink frames, RoPE mode) of the model's KV buffer."""

    def keep_sink_on_recache(self) -> bool:
        """At a prompt switch, keep the sink's keys/values from before the switch (not recomputed)."""


def prompt_switches_at(spec: GenerationSpec, b: int) -> bool:
    """Block b starts a new prompt (its prompt differs from block b-1's)."""
    return b > 0 and spec.prompt_at(b).key != spec.prompt_at(b - 1).key


def append_cache_context(recipe, host: ContextHost, role: str, runner: CausalWan, state: GenerationState, b: int,
                         tally: Tally) -> KVCache:
    """The view block b's calls append to: the newest memoised view of this history extended by clean t = 0
    commit forwards of the blocks it lacks, each followed by a recache where the next block switches prompt.

    A memoised view whose slots a later block of its branch reused (a ring wraps in place) is a miss: the walk goes
    on to an older one. In a linear run the view after block b-1's commit is held, so a block costs one commit.
    """
    spec = state.spec
    F = spec.frames_per_block
    j, cached, lost = b, None, None  # cached: (the view for block j, the cost of making it); lost: the newest stale one
    while j >= 0:
        cached = host.memo.get(host.kv_key(runner, recipe, state, j))
        if cached is not None and cached[0].valid_for(F):
            break
        if cached is not None and lost is None:
            lost = (j, cached[1])
        cached, j = None, j - 1
    if cached is not None:
        kv = cached[0]
    else:  # block 0's empty cache is held too: block 1 commits block 0 into the buffer block 0 drafted in
        window, sink, rope = recipe.cache_layout(spec)
        j, kv = 0, host.empty_kv(runner, spec, window, sink=sink, rope=rope)
        host.hold(role, "kv", host.kv_key(runner, recipe, state, 0), (kv, {}), reuse=False)
    key = host.kv_key(runner, recipe, state, b)
    if j == b and b > 0:
        tally.reuse(f"{role}_kv", host.memo.origin(key))
        tally.credit_entry(key, cached[1])  # a fresh run commits b-1 (and recaches) for block b
    # A fresh run would have started from the lost view (held then): the commits before it only rebuild what a later
    # block of another branch overwrote in place, so they count as work, not as the block's fresh-run cost.
    fresh_from = j if lost is None else lost[0]
    if lost is not None and lost[0] == b and b > 0:
        tally.credit_entry(key, lost[1])
    for k in range(j, b):
        sub = Tally()
        kv = host.context_forward(role, runner, state.latent_frames(k * F, (k + 1) * F), timestep_tensor(0.0, 1, F),
                                  state, k * F, kv, sub, text_block=k)
        if host.tracing:
            host.trace_kv(f"{role}/block{k}/commit/kv", kv, slot_frame=True)
        if prompt_switches_at(spec, k + 1):
            kv = recache(recipe, host, role, runner, state, k + 1, kv, sub)
        for name, n in sub.work.items():
            if k >= fresh_from:
                tally.add(name, n)
            else:
                tally.work[name] += n  # rebuild: computed now, not part of what the video costs
        # the newest view is held for the generation so a sequential run never rebuilds from the start; the LRU gets a
        # snapshot (the live view's slots are overwritten as the ring wraps) when the budget can keep one, so a
        # re-queue (another tau) restarts from the block it changed instead of rebuilding the chain from block 0
        key = host.kv_key(runner, recipe, state, k + 1)
        entry_cost = {name: n for name, n in sub.cost.items() if n}
        host.hold(role, "kv", key, (kv, entry_cost), reuse=False)
        if host.memo.keeps(kv.nbytes):
            host.memo.put(key, (kv.clone(), entry_cost))
        tally.computed(key)
    return kv


def recache(recipe, host: ContextHost, role: str, runner: CausalWan, state: GenerationState, b: int, kv: KVCache,
            tally: Tally) -> KVCache:
    """LongLive's KV recache before block b, the first of a new prompt (InteractiveCausalInferencePipeline.
    _recache_after_switch): one clean t = 0 forward under block b's prompt over the newest min(window, generated)
    generated latent frames, at their own positions, rewriting the cache in place without advancing it. With a
    kept sink (LongLive global_sink, and only when the recached frames do not start at frame 0) the sink slots keep
    the old prompt's keys and the frames that map onto them only query; otherwise the first recached frames
    become the sink. A cache without window (Self-Forcing) recaches every generated frame."""
    end = b * state.spec.frames_per_block
    n = kv.frames  # the cache holds min(window, end) frames: LongLive recaches min(local_attn_size, end)
    first = end - n
    plan = kv.rewrite(n, first, keep_sink=recipe.keep_sink_on_recache() and first > 0)
    kv = host.context_forward(role, runner, state.latent_frames(first, end), timestep_tensor(0.0, 1, n), state,
                              first, plan, tally, text_block=b)
    if host.tracing:
        host.trace_kv(f"{role}/block{b}/recache/kv", kv, slot_frame=True)
    return kv


@dataclass(frozen=True)
class SelfForcingRecipe:
    """Self-Forcing causal inference (guandeh17/Self-Forcing pipeline/causal_inference.py)."""

    window: int | None = None  # latent frames kept in the cache (a rolling window, no sink); None = the whole video
    name: str = "self_forcing"

    rebuilds_context_every_block = False
    has_reference_sdvg = False
    supports_prompt_switch = True

    @property
    def plan(self) -> StepPlan:
        return self_forcing_plan()

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        return self.window if self.window is not None else num_latent_frames

    def cache_layout(self, spec: GenerationSpec) -> tuple[int, int, str]:
        return self.window_frames(spec.frames_per_block, spec.num_latent_frames), 0, "baked"

    def keep_sink_on_recache(self) -> bool:
        return False  # no sink

    def query_frames(self, frames_per_block: int) -> int:
        """A block; with a window, a recache at a prompt switch runs the whole window in one call (a global cache's
        recache runs every generated frame: not counted here)."""
        return frames_per_block if self.window is None else max(frames_per_block, self.window)

    def pixel_history(self, temporal_compression: int) -> int:
        return 0

    def validate(self, spec: GenerationSpec) -> None:
        if self.window is not None and self.window < spec.frames_per_block:
            raise ValueError(f"KV window of {self.window} frames cannot hold a block of {spec.frames_per_block}")

    def context_forwards(self, num_blocks: int, switches: int = 0) -> int:
        """One clean commit forward per block but the last (commits are made when the next block needs them); each
        prompt switch adds one recache forward."""
        return max(num_blocks - 1, 0) + switches

    def context(self, host: ContextHost, role: str, runner: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """Extend the newest memoised view with clean t = 0 forwards of the missing blocks (recaching the whole
        cache at a prompt switch, as LongLive does without a window); absolute RoPE."""
        return append_cache_context(self, host, role, runner, state, b, tally), b * state.spec.frames_per_block
