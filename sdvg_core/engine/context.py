"""What a context recipe may use from the engine: memo, stable keys, model calls, committed pixels, tracing.

The engine owns one ContextServices; recipes (recipes.py) get it as their `host` and build a block's KV
context through it, so recipe code never reaches into the engine. Per-prompt cross-attention K/V live here
too: every context and denoising call needs them (docs/design.md §3.2).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..models.wan import CausalWan, KVCache, KVWrite, TextKV
from .keys import KVKey, TextKey
from .pixels import PixelStore
from .state import GenerationSpec, GenerationState
from .tally import Tally


class ContextServices:
    """Implements recipes.ContextHost over the engine's memo, VAE, pixel store, tracer and callbacks."""

    def __init__(self, memo, vae, pixels: PixelStore, vae_key: str, decode_rule: str,
                 tracer: Callable[[str, torch.Tensor], None] | None, callbacks):
        self.memo, self.vae, self.pixels = memo, vae, pixels
        self.vae_key, self.decode_rule = vae_key, decode_rule
        self.tracer, self.callbacks = tracer, callbacks

    def _interrupt(self) -> None:
        if self.callbacks.interrupt is not None:
            self.callbacks.interrupt()

    def text(self, runner: CausalWan, state: GenerationState, b: int | None = None) -> TextKV:
        """Cross-attention K/V of block b's prompt (default: the block being generated) for one model, computed
        once per (model, prompt) and held for the generation (every block's calls need it)."""
        prompt = state.spec.prompt_at(state.next_block if b is None else b)
        key = TextKey(runner.key, prompt.key)
        text = self.memo.get(key)
        if text is None:
            text = runner.encode_text(prompt.embeddings, interrupt=self.callbacks.interrupt)
        # held for the run (re-held on a hit: a new run holds what it uses), one entry per prompt of the schedule
        self.memo.pin(f"text:{runner.key}", key, text, keep=len(state.spec.schedule))
        return text

    def hold(self, role: str, what: str, key, value, keep: int = 1, reuse: bool = True):
        """Keep `value` for the rest of the generation, outside the memo's budget (the newest `keep` per slot); with
        `reuse` also in the LRU for later runs (not for a live view a run overwrites in place: keep a snapshot)."""
        slot = f"{what}:{role}"
        return self.memo.pin(slot, key, value, keep) if reuse else self.memo.hold(slot, key, value, keep)

    @property
    def temporal_compression(self) -> int:
        return self.vae.config.temporal_compression

    @property
    def tracing(self) -> bool:
        return self.tracer is not None

    def kv_key(self, runner: CausalWan, recipe, state: GenerationState, b: int) -> KVKey:
        return KVKey(runner.key, state.spec.prompt_at(b).key, recipe, self.vae_key, self.decode_rule, state.lineage_at(b))

    def empty_kv(self, runner: CausalWan, spec: GenerationSpec, window: int, *, sink: int = 0,
                 rope: str = "baked") -> KVCache:
        """A fresh cache of `window` latent-frame slots on the runner's device, the first `sink` of them a sink;
        `rope`: keys stored rotated ("baked") or rotated by slot index at every call ("slot", LongLive infinity)."""
        h, w = spec.latent_hw
        return KVCache.empty(runner.cfg, batch=1, window_frames=window, tokens_per_frame=runner.cfg.tokens_per_frame(h, w),
                             device=runner.device, dtype=runner.dtype, sink_frames=sink, rope=rope)

    def context_forward(self, role: str, runner: CausalWan, latents: torch.Tensor, t: torch.Tensor,
                        state: GenerationState, frame_offset: int, kv: KVCache | KVWrite, tally: Tally,
                        text_block: int | None = None) -> KVCache:
        """One clean forward writing `latents` into `kv` (a view: appended after it; a `KVWrite` plan such as a
        recache's `rewrite`: that write) and returning the committed view, under block `text_block`'s prompt
        (default: the block being generated, as Krea's rebuild does; a commit of block k passes k)."""
        self._interrupt()
        text = self.text(runner, state, text_block)
        out = runner.forward(latents.to(runner.device), t, text, frame_offset=frame_offset, kv=kv, commit=True,
                             want_output=False, interrupt=self.callbacks.interrupt)
        tally.add(f"{role}_forwards", 1)
        tally.add(f"{role}_context_forwards", 1)
        return out.kv

    def pixels_before(self, b: int, spec: GenerationSpec) -> int:
        return self.pixels.pixels_before(b, spec)

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
