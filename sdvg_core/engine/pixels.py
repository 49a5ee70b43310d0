"""Decoded pixels and VAE decoder caches of committed blocks, plus draft decodes that leave no trace.

The Wan VAE decodes causally: block b's pixels depend on a feature cache carried from block b-1. Committed
blocks are decoded once, in order, and their pixels (CPU) and the cache after them are memoised by lineage;
the newest cache is pinned outside the memo budget so a sequential run never re-decodes from the start.
A draft is decoded from the committed cache without changing it (DecoderCache is immutable): a rejected draft
leaves no trace, an accepted one hands its decode to the commit (docs/design.md §3.3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .keys import DecoderCacheKey, DraftDecodeKey, PixelsKey
from .state import GenerationSpec, GenerationState
from .tally import Tally


def held_pixel_blocks(history_frames: int, temporal_compression: int, frames_per_block: int) -> int:
    """Newest committed blocks whose decoded pixels cover the last `history_frames` pixel frames (at least the
    newest block, which the output writer reads). Krea's 9-frame anchor history fits the newest 12-frame block."""
    return max(1, -(-history_frames // (temporal_compression * frames_per_block)))


@dataclass(frozen=True)
class DecodeEntry:
    """One block's decoded pixels [1, 3, T, H, W] (clamped to [-1, 1]) and the decoder cache after it."""

    pixels: torch.Tensor
    cache: Any  # models.vae.DecoderCache


class PixelStore:
    """Committed decodes memoised by lineage; all decoding of the engine goes through here.

    Held for the running generation (outside the memo's budget): the decoder cache after the newest block, the
    decoded pixels of the newest blocks that cover `history_frames` (what the recipes re-encode, e.g. Krea's
    anchor) plus the newest block itself (the output writer reads it), and the pending draft's decode.
    """

    HEAD_SLOT = "decoder_head"
    PIXELS_SLOT = "pixels"
    DRAFT_SLOT = "draft_decode"

    def __init__(self, vae, vae_key: str, rule: str, memo, interrupt: Callable[[], Callable[[], None] | None],
                 history_frames: int = 0):
        self.vae, self.vae_key, self.rule, self.memo = vae, vae_key, rule, memo
        self._interrupt = interrupt  # returns the host's current interrupt callback (or None)
        self.history_frames = history_frames  # decoded pixel frames the recipes read back

    def held_blocks(self, spec: GenerationSpec) -> int:
        """Committed blocks whose pixels are held (see `held_pixel_blocks`)."""
        return held_pixel_blocks(self.history_frames, self.vae.config.temporal_compression, spec.frames_per_block)

    def pixels_before(self, b: int, spec: GenerationSpec) -> int:
        """Pixel frames decoded from the first b blocks (1 + 4(T-1) for T latent frames)."""
        return self.vae.config.pixel_frames(b * spec.frames_per_block)

    def decode(self, latents: torch.Tensor, cache) -> DecodeEntry:
        """Decode latents [1, F, C, h, w] continuing `cache` (None = start of the video)."""
        z = latents.to(self.vae.device).permute(0, 2, 1, 3, 4)  # [1, F, C, h, w] -> [1, C, F, h, w]
        pixels, new_cache = self.vae.decode_stream(z, cache, rule=self.rule, interrupt=self._interrupt())
        return DecodeEntry(pixels.clamp(-1, 1), new_cache)

    def _pixels_key(self, lineage: str) -> PixelsKey:
        return PixelsKey(self.vae_key, self.rule, lineage)

    def _cache_key(self, lineage: str) -> DecoderCacheKey:
        return DecoderCacheKey(self.vae_key, self.rule, lineage)

    def store(self, lineage: str, entry: DecodeEntry, spec: GenerationSpec) -> torch.Tensor:
        """Keep a committed block's pixels (on the CPU, held while the recipes may read them) and the decoder
        cache after it (held as the head)."""
        pixels = self.memo.pin(self.PIXELS_SLOT, self._pixels_key(lineage), entry.pixels.to("cpu"),
                               keep=self.held_blocks(spec))
        self.memo.pin(self.HEAD_SLOT, self._cache_key(lineage), entry.cache)
        return pixels

    def cache_after(self, state: GenerationState, b: int, tally: Tally | None) -> Any:
        """Decoder cache after committed block b (None for b < 0), decoding forward from the newest kept one."""
        start, cache = b, None
        while start >= 0:
            cache = self.memo.get(self._cache_key(state.blocks[start].lineage))
            if cache is not None:
                break
            start -= 1
        for k in range(start + 1, b + 1):
            entry = self.decode(state.blocks[k].latents, cache)
            self.store(state.blocks[k].lineage, entry, state.spec)
            cache = entry.cache
            if tally is not None:
                tally.add("vae_decode_frames", state.blocks[k].latents.shape[1])
        return cache

    def committed_pixels(self, state: GenerationState, b: int, tally: Tally | None = None) -> torch.Tensor:
        """Decoded pixels of committed block b, [1, 3, T, H, W] in [-1, 1] on the CPU."""
        pixels = self.memo.get(self._pixels_key(state.blocks[b].lineage))
        if pixels is None:
            entry = self.decode(state.blocks[b].latents, self.cache_after(state, b - 1, tally))
            pixels = self.store(state.blocks[b].lineage, entry, state.spec)
            if tally is not None:
                tally.add("vae_decode_frames", state.blocks[b].latents.shape[1])
        return pixels

    def pixel_frame(self, state: GenerationState, g: int, tally: Tally) -> torch.Tensor:
        """Committed pixel frame number g of the video, [1, 3, H, W]."""
        spec = state.spec
        k = max(j for j in range(len(state.blocks)) if self.pixels_before(j, spec) <= g)
        return self.committed_pixels(state, k, tally)[:, :, g - self.pixels_before(k, spec)]

    def decode_draft(self, state: GenerationState, latents: torch.Tensor, key: DraftDecodeKey,
                     tally: Tally) -> DecodeEntry:
        """Decode a draft of block state.next_block from the committed cache, which stays as it was."""
        cached = self.memo.get(key)  # (entry, the cost of computing it)
        if cached is not None:
            tally.credit(cached[1])
            tally.reuse("draft_decode", self.memo.origin(key))
            return cached[0]
        entry = self.decode(latents, self.cache_after(state, state.next_block - 1, tally))
        n = latents.shape[1]
        tally.add("vae_decode_frames", n)
        self.memo.pin(self.DRAFT_SLOT, key, (entry, {"vae_decode_frames": n}))  # the route hands it to the commit
        return entry

    def commit(self, state: GenerationState, latents: torch.Tensor, lineage: str, draft: DecodeEntry | None,
               tally: Tally) -> torch.Tensor:
        """Decode (or take the accepted draft's decode of) the block being committed after `state`."""
        if draft is not None:  # the draft's decode is the committed one: no second decode
            return self.store(lineage, draft, state.spec)
        key, cache_key = self._pixels_key(lineage), self._cache_key(lineage)
        pixels, cache = self.memo.get(key), self.memo.get(cache_key)
        if pixels is not None and cache is not None:  # kept from an earlier run; a fresh run decodes it
            tally.credit({"vae_decode_frames": latents.shape[1]})
            tally.reuse("pixels", self.memo.origin(key))
            self.memo.pin(self.HEAD_SLOT, cache_key, cache)  # the next block decodes on from here
            return self.memo.pin(self.PIXELS_SLOT, key, pixels, keep=self.held_blocks(state.spec))
        # without the decoder cache after it, decode again: the head moves on block by block and a later decode
        # never walks back to the start of the video
        entry = self.decode(latents, self.cache_after(state, state.next_block - 1, tally))
        tally.add("vae_decode_frames", latents.shape[1])
        return self.store(lineage, entry, state.spec)
