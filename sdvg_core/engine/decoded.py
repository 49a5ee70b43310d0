"""Decoded pixels and VAE decoder caches of committed blocks, plus draft decodes that leave no trace.

The Wan VAE decodes causally: block b's pixels depend on a feature cache carried from block b-1. Committed
blocks are decoded once, in order, and their pixels (CPU) and the cache after them are memoised by lineage;
the newest cache is pinned outside the memo budget so a sequential run never re-decodes from the start.
A draft is decoded from the committed cache without changing it (DecoderCache is immutable): a rejected draft
leaves no trace, an accepted one hands its decode to the commit (docs/design.md §3.3). A routing decoder other than
the VAE (a tiny TAEHV) has a store of its own (engine.py): its memory advances along the committed blocks only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..derived.keys import DecoderCacheKey, DraftDecodeKey, GivenDecodeKey, PixelsKey
from ..derived.memo import Hold, Memoiser
from ..models.vae import VAE_PRESETS, WanVAEConfig
from .state import GenerationSpec, GenerationState
from ..derived.tally import Tally


def held_pixel_blocks(history_frames: int, temporal_compression: int, frames_per_block: int) -> int:
    """Newest committed blocks whose decoded pixels cover the last `history_frames` pixel frames (at least the
    newest block, which the output writer reads). Krea's 9-frame anchor history fits the newest 12-frame block."""
    return max(1, -(-history_frames // (temporal_compression * frames_per_block)))


NO_VAE_KEY = "no-vae"


class NoVAE:
    """Stands in for the VAE where the routing never reads pixels (target-only and score-blind policies in ComfyUI's
    AR sampler, whose VAE Decode comes after it): the Wan 2.1 VAE's frame arithmetic (`config`), no weights; a
    decode or an encode raises, naming the input to connect. Its `key` keeps the results of such a run apart from a
    run with a VAE in the memo."""

    key = NO_VAE_KEY
    dtype = torch.float32

    def __init__(self, config: WanVAEConfig = VAE_PRESETS["wan2.1-vae"], needed_for: str = "decoding a draft"):
        self.config, self.needed_for = config, needed_for

    def _refuse(self, *args, **kwargs):
        raise ValueError(f"{self.needed_for} needs the Wan 2.1 VAE, and this run was built without one: connect a VAE "
                         f"(Load VAE), or use a policy that scores no draft (target_only, draft_only)")

    decode_stream = encode_stream = encode_anchor_frame = _refuse


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

    HEAD = Hold("decoder_head")
    GIVEN = Hold("given_decode")  # the decoder cache after the given latents (block 0 continues it)
    DRAFT = Hold("draft_decode")  # the route hands it to the commit
    PIXELS_SLOT = "pixels"

    def __init__(self, vae, vae_key: str, rule: str, memoiser: Memoiser, interrupt: Callable[[], Callable[[], None] | None],
                 history_frames: int = 0, decode_on_commit: bool = True, role: str = "",
                 work_key: str = "vae_decode_frames", keeps_pixels: bool = True):
        """`role`: a prefix of this store's hold slots, so a second decoder's store (a routing decoder's, "route_")
        holds its own head, draft and pixels beside the VAE's; `work_key`: the tally entry its decodes count in;
        `keeps_pixels` False: committed pixels are not kept (a routing decoder's frames are scored, not shown)."""
        self.vae, self.vae_key, self.rule, self.memoiser = vae, vae_key, rule, memoiser
        if role:
            self.HEAD, self.GIVEN, self.DRAFT = (Hold(role + h.slot) for h in (self.HEAD, self.GIVEN, self.DRAFT))
            self.PIXELS_SLOT = role + self.PIXELS_SLOT
        self.work_key, self.keeps_pixels = work_key, keeps_pixels
        self._interrupt = interrupt  # returns the host's current interrupt callback (or None)
        self.history_frames = history_frames  # decoded pixel frames the recipes read back
        # False: a committed block needing a fresh decode is left undecoded until something reads it (EngineConfig's
        # decode_committed: only latents leave the run)
        self.decode_on_commit = decode_on_commit

    def held_blocks(self, spec: GenerationSpec) -> int:
        """Committed blocks whose pixels are held (see `held_pixel_blocks`)."""
        return held_pixel_blocks(self.history_frames, self.vae.config.temporal_compression, spec.frames_per_block)

    def _pixels_hold(self, spec: GenerationSpec) -> Hold:
        return Hold(self.PIXELS_SLOT, keep=self.held_blocks(spec))

    def pixels_before(self, b: int, state: GenerationState) -> int:
        """Pixel frames decoded from the first b blocks (1 + 4(T-1) for T latent frames; after given latents the
        output decodes first, 4 T: the given frames are not counted)."""
        p = self._prefix_frames(state)
        pixel_frames = self.vae.config.pixel_frames
        return pixel_frames(p + state.spec.frames_before(b)) - pixel_frames(p)

    @staticmethod
    def _prefix_frames(state: GenerationState) -> int:
        prefix = None if state.given is None else state.given.decode_prefix
        return 0 if prefix is None else prefix.shape[1]

    def given_cache(self, state: GenerationState, tally: Tally | None) -> Any:
        """The decoder cache before block 0: None, or after the given latents the output decodes first (Self-Forcing
        / LongLive targets with a start image or an extension), memoised by the root lineage."""
        prefix = None if state.given is None else state.given.decode_prefix
        if prefix is None:
            return None

        def decode(part: Tally) -> Any:
            cache, F = None, state.spec.frames_per_block
            for s in range(0, prefix.shape[1], F):
                cache = self.decode(prefix[:, s:s + F], cache).cache
            part.add(self.work_key, prefix.shape[1])
            return cache

        key = GivenDecodeKey(self.vae_key, self.rule, state.lineage_at(0))
        return self.memoiser.memoised(key, None, tally if tally is not None else Tally(), decode, hold=self.GIVEN)

    def decode(self, latents: torch.Tensor, cache) -> DecodeEntry:
        """Decode latents [1, F, C, h, w] continuing `cache` (None = start of the video)."""
        z = latents.to(self.vae.device).permute(0, 2, 1, 3, 4)  # [1, F, C, h, w] -> [1, C, F, h, w]
        pixels, new_cache = self.vae.decode_stream(z, cache, rule=self.rule, interrupt=self._interrupt())
        return DecodeEntry(pixels.clamp(-1, 1), new_cache)

    def _pixels_key(self, lineage: str) -> PixelsKey:
        return PixelsKey(self.vae_key, self.rule, lineage)

    def _cache_key(self, lineage: str) -> DecoderCacheKey:
        return DecoderCacheKey(self.vae_key, self.rule, lineage)

    def store(self, lineage: str, entry: DecodeEntry, spec: GenerationSpec, tally: Tally | None,
              frames: int) -> torch.Tensor:
        """Keep a committed block's pixels (on the CPU, held while the recipes may read them; reusing them saves
        decoding the block's `frames` latent frames) and the decoder cache after it (held as the head)."""
        pixels = entry.pixels
        if self.keeps_pixels:
            pixels = self.memoiser.keep(self._pixels_key(lineage), entry.pixels.to("cpu"), tally,
                                        cost={self.work_key: frames}, hold=self._pixels_hold(spec))
        self.memoiser.keep(self._cache_key(lineage), entry.cache, tally, hold=self.HEAD)
        return pixels

    def cache_after(self, state: GenerationState, b: int, tally: Tally | None) -> Any:
        """Decoder cache after committed block b (None for b < 0), decoding forward from the newest kept one."""
        start, cache = b, None
        while start >= 0:
            cache = self.memoiser.peek(self._cache_key(state.blocks[start].lineage))
            if cache is not None:
                break
            start -= 1
        if start < 0:
            cache = self.given_cache(state, tally)
        for k in range(start + 1, b + 1):
            entry = self.decode(state.blocks[k].latents, cache)
            self.store(state.blocks[k].lineage, entry, state.spec, tally, state.blocks[k].latents.shape[1])
            cache = entry.cache
            if tally is not None:
                tally.add(self.work_key, state.blocks[k].latents.shape[1])
        return cache

    def committed_pixels(self, state: GenerationState, b: int, tally: Tally | None = None) -> torch.Tensor:
        """Decoded pixels of committed block b, [1, 3, T, H, W] in [-1, 1] on the CPU."""
        pixels = self.memoiser.peek(self._pixels_key(state.blocks[b].lineage))
        if pixels is None:
            entry = self.decode(state.blocks[b].latents, self.cache_after(state, b - 1, tally))
            pixels = self.store(state.blocks[b].lineage, entry, state.spec, tally, state.blocks[b].latents.shape[1])
            if tally is not None:
                tally.add(self.work_key, state.blocks[b].latents.shape[1])
        return pixels

    def pixel_frame(self, state: GenerationState, g: int, tally: Tally) -> torch.Tensor:
        """Committed pixel frame number g of the video, [1, 3, H, W]."""
        k = max(j for j in range(len(state.blocks)) if self.pixels_before(j, state) <= g)
        return self.committed_pixels(state, k, tally)[:, :, g - self.pixels_before(k, state)]

    def decode_draft(self, state: GenerationState, latents: torch.Tensor, key: DraftDecodeKey,
                     tally: Tally) -> DecodeEntry:
        """Decode a draft of block state.next_block from the committed cache, which stays as it was."""
        def compute(part: Tally) -> DecodeEntry:
            # decoding up to the committed cache again (lost to eviction) is not the draft's cost: the operation's
            entry = self.decode(latents, self.cache_after(state, state.next_block - 1, tally))
            part.add(self.work_key, latents.shape[1])
            return entry

        return self.memoiser.memoised(key, "draft_decode", tally, compute, hold=self.DRAFT)

    def commit(self, state: GenerationState, latents: torch.Tensor, lineage: str, draft: DraftDecodeKey | None,
               tally: Tally) -> torch.Tensor | None:
        """Decode (or take the accepted draft's decode, memoised under `draft`, or recall) the block being committed
        after `state`; without `decode_on_commit` a block that would need a fresh decode is left undecoded (None):
        `cache_after` and `committed_pixels` decode it when something reads it."""
        entry = None if draft is None else self.memoiser.peek(draft)
        if entry is not None:  # the draft's decode is the committed one: no second decode
            return self.store(lineage, entry, state.spec, tally, latents.shape[1])
        key, cache_key = self._pixels_key(lineage), self._cache_key(lineage)
        # kept from an earlier run (a fresh run decodes it); the next block decodes on from its cache
        found = self.memoiser.recall((key, cache_key), "pixels", tally,
                                  hold_again=((1, self.HEAD), (0, self._pixels_hold(state.spec))))
        if found is not None:
            return found[0]
        if not self.decode_on_commit:
            return None
        # without the decoder cache after it, decode again: the head moves on block by block and a later decode
        # never walks back to the start of the video
        entry = self.decode(latents, self.cache_after(state, state.next_block - 1, tally))
        tally.add(self.work_key, latents.shape[1])
        return self.store(lineage, entry, state.spec, tally, latents.shape[1])
