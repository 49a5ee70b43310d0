"""A video to restyle, read as the run goes (docs/pixels.md §4: Krea's streaming encode): block b's pixel frames (9
for block 0, then 12) are encoded continuing one causal encoder cache, memoised per block by (VAE, pixels, size,
block) with the newest encoder cache held, so a run never holds the whole input. A block the input does not fill,
or whose frames cannot be decoded, has no latents: the run ends before it (given/pixels.py `GivenPixels.stopped`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..derived.keys import InputBlockKey
from ..derived.memo import Hold, Memoiser
from ..derived.tally import Tally
from .errors import InputUnreadable
from .request import PixelInput

Interrupt = Callable[[], Callable[[], None] | None]


@dataclass(frozen=True)
class InputBlock:
    """Block b of an input video: its latents [1, F, C, h, w] (CPU; None when the input ran out before the block
    filled, or a frame of it could not be decoded: `unreadable` then says which) and the encoder cache after it."""

    latents: torch.Tensor | None
    cache: object  # models.vae.EncoderCache
    unreadable: str | None = None


class _Reader:
    """A frame source read forward from one position; asked for an earlier position, it starts again. A frame that
    cannot be decoded ends what it can give (`error`), after the frames before it."""

    def __init__(self, pixels: PixelInput, run_hw: tuple[int, int]):
        self.pixels, self.run_hw = pixels, run_hw
        self.position, self._pieces, self._left = -1, iter(()), None  # opened at the first take
        self.error: InputUnreadable | None = None

    def take(self, start: int, n: int) -> torch.Tensor | None:
        """Frames [start, start + n) as [1, 3, t, H, W] (t < n where the input ends or breaks; None when none)."""
        if start != self.position:
            self._pieces, self._left, self.position = iter(self.pixels.source.pieces(self.run_hw, start)), None, start
            self.error = None
        got, have = [], 0
        while have < n:
            piece = self._left
            self._left = None
            if piece is None and self.error is None:
                try:
                    piece = next(self._pieces, None)
                except InputUnreadable as e:
                    self.error = e
            if piece is None:
                break
            need = n - have
            if piece.shape[2] > need:
                piece, self._left = piece[:, :, :need], piece[:, :, need:]
            got.append(piece)
            have += piece.shape[2]
        self.position += have
        return torch.cat(got, dim=2) if got else None


class InputVideo:
    """The input video of a video-to-video run, encoded block by block as the run goes (one encoder cache for the
    whole input)."""

    HEAD = Hold("input_head")  # the newest block's entry (its encoder cache continues the input)

    def __init__(self, vae, vae_key: str, memoiser: Memoiser, interrupt: Interrupt):
        self.vae, self.vae_key, self.memoiser, self._interrupt = vae, vae_key, memoiser, interrupt
        self._reader: _Reader | None = None

    def close(self) -> None:
        self._reader = None

    def _key(self, state, b: int) -> InputBlockKey:
        spec = state.spec
        return InputBlockKey(self.vae_key, spec.pixels.digest, (spec.height, spec.width), spec.frames_per_block, b)

    def entry(self, state, b: int, tally: Tally) -> InputBlock | None:
        """Block b's entry (encoded once per block whichever role asks first; a fresh run's work too: not recorded as
        a reuse), or None when an earlier block already had no latents."""
        j = b
        while j >= 0 and self.memoiser.peek(self._key(state, j)) is None:
            j -= 1
        entry = self.memoiser.peek(self._key(state, j)) if j >= 0 else None
        for k in range(j + 1, b + 1):
            if k > 0 and (entry is None or entry.latents is None):
                return None
            entry = self.memoiser.memoised(self._key(state, k), None, tally,
                                        lambda part, k=k, prev=entry: self._encode(state, k, prev, part), hold=self.HEAD)
        return entry

    def block(self, state, b: int, tally: Tally) -> torch.Tensor | None:
        """Block b's input latents [1, F, C, h, w] on the CPU, or None when the input ends (or breaks) before b fills."""
        entry = self.entry(state, b, tally)
        return entry.latents if entry is not None else None

    def _encode(self, state, b: int, prev: InputBlock | None, part: Tally) -> InputBlock:
        given, spec = state.given, state.spec
        start, n = given.block_start(b), given.block_frames(b)
        if self._reader is None or self._reader.pixels.digest != spec.pixels.digest:
            self._reader = _Reader(spec.pixels, (spec.height, spec.width))
        frames = self._reader.take(start, n)
        if frames is None or frames.shape[2] < n:
            err = self._reader.error
            return InputBlock(None, None, None if err is None else str(err))
        latents, cache = self.vae.encode_stream(frames.to(self.vae.device), None if prev is None else prev.cache,
                                                self._interrupt())
        part.add("vae_encodes", 1)
        return InputBlock(latents.permute(0, 2, 1, 3, 4).float().to("cpu"), cache)
