"""What a context recipe may use from the engine: memoised computation, KV views, model calls, committed pixels,
tracing.

The engine owns one ContextServices; recipes (recipes/) get it as their `host` and build a block's KV context
through it, so recipe code never reaches into the engine, its memo or a tally's fields. Per-prompt
cross-attention K/V live here too: every context and denoising call needs them (docs/design.md §3.2).
"""
from __future__ import annotations

from typing import Any, Callable, Hashable

import torch

from ..models.kv_cache import KVCopyStats
from ..models.wan import CausalWan, KVCache, KVWrite, TextKV
from ..derived.keys import KVKey, TextKey
from ..derived.memo import Hold, Memoiser
from .decoded import PixelStore
from .state import GenerationSpec, GenerationState
from ..derived.tally import Tally


class ContextServices:
    """Implements recipes.ContextHost over the engine's memoiser, VAE, pixel store, tracer and callbacks.
    `kv_copies`: an instrumentation hook the engine's caller may install, counting the cached data KV views copy."""

    def __init__(self, memoiser: Memoiser, vae, pixels: PixelStore, vae_key: str, decode_rule: str,
                 tracer: Callable[[str, torch.Tensor], None] | None, callbacks, kv_copies: KVCopyStats | None = None):
        self.memoiser, self.vae, self.pixels = memoiser, vae, pixels
        self.vae_key, self.decode_rule = vae_key, decode_rule
        self.tracer, self.callbacks = tracer, callbacks
        self.kv_copies = kv_copies
        self._run_kv: dict[tuple, KVCache] = {}  # this run's KV buffers (their first empty view), by owner and layout

    def release_run(self) -> None:
        """The generation ended: drop its KV buffers (device memory; the memo keeps clones, not these)."""
        self._run_kv.clear()

    def _interrupt(self) -> None:
        if self.callbacks.interrupt is not None:
            self.callbacks.interrupt()

    def text(self, dit: CausalWan, state: GenerationState, tally: Tally, b: int | None = None) -> TextKV:
        """Cross-attention K/V of block b's prompt (default: the block being generated) for one model, computed
        once per (model, prompt) and held for the generation (every block's calls need it; held again when reused:
        a new run holds what it uses), one entry per prompt of the schedule. Not work counted per block."""
        prompt = state.spec.prompt_at(state.next_block if b is None else b)
        hold = Hold(f"text:{dit.key}", keep=len(state.spec.schedule))
        return self.memoiser.memoised(TextKey(dit.key, prompt.key), None, tally,
                                   lambda _: dit.encode_text(prompt.embeddings, interrupt=self.callbacks.interrupt),
                                   hold=hold, hold_on_reuse=True)

    def memoised(self, key: Hashable, label: str, tally: Tally, compute: Callable[[Tally], Any], *,
                 hold: Hold | None = None) -> Any:
        """The result under `key`, reused (recorded as `label`, its cost credited once) or `compute(part)` (whose
        cost is what it charges to `part`); `hold` keeps it for the rest of the generation outside the memo's budget."""
        return self.memoiser.memoised(key, label, tally, compute, hold=hold)

    def extend_kv(self, role: str, dit: CausalWan, recipe, state: GenerationState, b: int, tally: Tally,
                  layout: tuple[int, int, str], commit: Callable[[int, KVCache, Tally], KVCache],
                  prefix: Callable[[KVCache, Tally], KVCache] | None = None) -> KVCache:
        """The view block b's calls append to: the newest memoised view of this history (one a later block of its
        branch overwrote is skipped) extended by `commit(k, view, part)` for each block k it lacks, from an empty
        cache of `layout` (window frames, sink frames, RoPE mode) when there is none. Each new view is held for the
        generation (a sequential run never rebuilds from the start) and a snapshot offered to the memo's budget (a
        re-queue restarts from the block it changed). `prefix(view, part)`: what the view before block 0 holds
        besides nothing (given latents: docs/pixels.md §4)."""
        spec = state.spec
        # what block b's calls append: its own frames (a short last block fewer); past the last block (the whole
        # video's committed view, for a caller that reads it) a whole block
        appended = spec.block_frames(b) if b < spec.num_blocks else spec.frames_per_block
        window, sink, rope = layout

        def start(part: Tally) -> KVCache:
            kv = self.run_kv(dit, recipe, state.spec, layout)
            return kv if prefix is None else prefix(kv, part)

        return self.memoiser.extend(lambda j: self.kv_key(dit, recipe, state, j), b, f"{role}_kv", tally,
                                    usable=lambda kv: kv.valid_for(appended), start=start,
                                 step=commit, hold=Hold(f"kv:{role}", lru=False), snapshot=KVCache.clone)

    @property
    def temporal_compression(self) -> int:
        return self.vae.config.temporal_compression

    @property
    def tracing(self) -> bool:
        return self.tracer is not None

    def kv_key(self, dit: CausalWan, recipe, state: GenerationState, b: int) -> KVKey:
        return KVKey(dit.key, state.spec.prompt_at(b).key, recipe, self.vae_key, self.decode_rule, state.lineage_at(b))

    def empty_kv(self, dit: CausalWan, spec: GenerationSpec, window: int, *, sink: int = 0,
                 rope: str = "baked") -> KVCache:
        """A fresh cache of `window` latent-frame slots on the dit's device, the first `sink` of them a sink;
        `rope`: keys stored rotated ("baked") or rotated by slot index at every call ("slot", LongLive infinity)."""
        h, w = spec.latent_hw
        return KVCache.empty(dit.cfg, batch=1, window_frames=window, tokens_per_frame=dit.cfg.tokens_per_frame(h, w),
                             device=dit.device, dtype=dit.dtype, sink_frames=sink, rope=rope,
                             copies=self.kv_copies)

    def run_kv(self, dit: CausalWan, recipe, spec: GenerationSpec, layout: tuple[int, int, str]) -> KVCache:
        """An empty view of this run's KV buffer for (dit, recipe, layout): allocated once, at the recipe's largest
        size (its window: LongLive's sink + window, Krea's context + block, the whole video with its given frames for
        Self-Forcing), when the run first needs it, then reused by every block: no new KV storage after that, and
        the same storage for every call (static inputs of a compiled block or a CUDA graph). The views of it an
        earlier block made go stale as their slots are rewritten (kv_cache.py), so a memo never reads them."""
        window, sink, rope = layout
        key = (id(dit), dit.key, recipe, window, sink, rope, spec.latent_hw)
        first = self._run_kv.get(key)
        if first is None:
            first = self._run_kv[key] = self.empty_kv(dit, spec, window, sink=sink, rope=rope)
        return KVCache.on(first.buffer)

    def rebuilt_kv(self, role: str, dit: CausalWan, recipe, state: GenerationState, b: int, tally: Tally,
                   layout: tuple[int, int, str], rebuild: Callable[[KVCache, Tally], KVCache]) -> KVCache:
        """Block b's context for a recipe that rebuilds it every block (Krea): `rebuild(empty view, part)` into this
        run's buffer, or, memoised (a re-queue), the memo's clone of it restored into that buffer (a copy of the
        context frames, not a forward). The memo keeps a clone because the run's buffer is the next block's."""
        empty = self.run_kv(dit, recipe, state.spec, layout)
        return self.memoiser.snapshotted(self.kv_key(dit, recipe, state, b), f"{role}_kv", tally,
                                      lambda part: rebuild(empty, part), snapshot=KVCache.clone,
                                      restore=lambda kv: kv.restore_into(empty.buffer))

    def context_forward(self, role: str, dit: CausalWan, latents: torch.Tensor, t: torch.Tensor,
                        state: GenerationState, frame_offset: int, kv: KVCache | KVWrite, tally: Tally,
                        text_block: int | None = None) -> KVCache:
        """One clean forward writing `latents` into `kv` (a view: appended after it; a `KVWrite` plan such as a
        recache's `rewrite`: that write) and returning the committed view, under block `text_block`'s prompt
        (default: the block being generated, as Krea's rebuild does; a commit of block k passes k)."""
        self._interrupt()
        text = self.text(dit, state, tally, text_block)
        out = dit.forward(latents.to(dit.device), t, text, frame_offset=frame_offset, kv=kv, commit=True,
                             want_output=False, interrupt=self.callbacks.interrupt)
        tally.add(f"{role}_forwards", 1)
        tally.add(f"{role}_context_forwards", 1)
        return out.kv

    def pixels_before(self, b: int, state: GenerationState) -> int:
        return self.pixels.pixels_before(b, state)

    def given_latents(self, state: GenerationState, recipe) -> torch.Tensor | None:
        """The given latents [1, g, C, h, w] (CPU) `recipe` starts its context from (a start image or an extension,
        encoded its way), or None (text-to-video, video-to-video)."""
        return None if state.given is None else state.given.of(recipe.given_encoding)

    def pixel_frame(self, state: GenerationState, g: int, tally: Tally) -> torch.Tensor:
        return self.pixels.pixel_frame(state, g, tally)

    def encode_frame(self, frame: torch.Tensor, spec: GenerationSpec, tally: Tally) -> torch.Tensor:
        self._interrupt()
        latent = self.vae.encode_anchor_frame(frame.to(self.vae.device), (spec.height, spec.width),
                                              interrupt=self.callbacks.interrupt)  # [1, C, 1, h, w]
        tally.add("vae_encodes", 1)
        return latent.permute(0, 2, 1, 3, 4).float()  # [1, 1, C, h, w]

    def trace(self, name: str, t: torch.Tensor) -> None:
        if self.tracer is not None:
            self.tracer(name, t)

    def trace_kv(self, name: str, kv: KVCache | KVWrite, extra: int = 0, slot_frame: bool = False) -> None:
        """Trace a cache in logical slot order (sink, then the window oldest first) as [B, S, heads, head_dim] per
        layer (the reference layout), with slot_frame also `{name}/slot_frame` (the latent frame in each slot, -1
        past the view).
        `extra` tokens: also the frames a call of that size appends after the view (its scratch, as the last
        call left it); a `KVWrite` plan: what its last call saw."""
        if self.tracer is None:
            return
        if isinstance(kv, KVCache) and extra:
            kv = kv.append(extra // kv.tokens_per_frame)
        if isinstance(kv, KVWrite):
            ks, vs, ids = kv.snapshot()
        else:
            layers = range(len(kv.buffer.k))
            ks, vs, ids = [kv.keys(i) for i in layers], [kv.values(i) for i in layers], kv.frame_ids
        for i, (k, v) in enumerate(zip(ks, vs)):
            self.trace(f"{name}/layer{i}/k", k.transpose(1, 2))
            self.trace(f"{name}/layer{i}/v", v.transpose(1, 2))
        if slot_frame:
            slots = kv.base.window_frames if isinstance(kv, KVWrite) else kv.window_frames
            self.trace(f"{name}/slot_frame", torch.tensor(list(ids) + [-1] * (slots - len(ids)), dtype=torch.int64))
