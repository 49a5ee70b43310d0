"""A start image or a video to extend as the latents a recipe's context starts from (docs/pixels.md §2, §4).

Each recipe says how it encodes given pixels (`GivenEncoding`, asked with `recipe.given_encoding`): Krea repeats a start
image into `context_frames` latents and encodes an extension as one clip (Krea `setup_start_frame`, `resume_latents`);
Self-Forcing / LongLive take a 1-latent start frame, or an extension's last whole blocks (Self-Forcing
`initial_latent`, which takes given latents in whole blocks). The encodings are memoised by (VAE, pixels, size,
encoding) and carried in the state (`GivenLatents`): a few latent frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..derived.keys import GivenKey
from ..derived.memo import Memoiser
from ..derived.tally import Account, Tally
from .encode import encode_clip, encode_start_frame
from .errors import PixelInputError
from .request import PixelInput, StartImage, block_frames, frames_before


class _KreaClip:
    """Krea: a start image repeated into `context_frames` latents; an extension encoded whole as one clip."""

    @staticmethod
    def min_extension_frames(enc: "GivenEncoding", frames_per_block: int, tc: int) -> int:
        return 1 + tc * (enc.context_frames - 1)

    @staticmethod
    def start(vae, image: torch.Tensor, run_hw, enc: "GivenEncoding", interrupt) -> torch.Tensor:
        return encode_start_frame(vae, image, run_hw, enc.context_frames, interrupt)

    @staticmethod
    def window(total: int, enc: "GivenEncoding", frames_per_block: int, tc: int) -> tuple[int, int]:
        return 0, 1 + tc * ((total - 1) // tc)  # the clip cut to 1 + 4k frames


class _InitialLatent:
    """Self-Forcing's `initial_latent`: a start image alone (1 latent); an extension's last whole blocks."""

    @staticmethod
    def min_extension_frames(enc: "GivenEncoding", frames_per_block: int, tc: int) -> int:
        return block_frames(0, frames_per_block, tc)  # one block of latents: 1 + tc (F - 1) frames

    @staticmethod
    def start(vae, image: torch.Tensor, run_hw, enc: "GivenEncoding", interrupt) -> torch.Tensor:
        return encode_clip(vae, image.unsqueeze(2), run_hw, interrupt)

    @staticmethod
    def window(total: int, enc: "GivenEncoding", frames_per_block: int, tc: int) -> tuple[int, int]:
        return extension_window(total, frames_per_block, tc)


ENCODINGS = {"krea": _KreaClip, "initial_latent": _InitialLatent}


@dataclass(frozen=True)
class GivenEncoding:
    """How a recipe turns a start image or an extension into its context's latents (docs/pixels.md section 2).

    `kind` "krea": the start image repeated 1 + (context_frames - 1) * 4 times -> `context_frames` latents (Krea
    `setup_start_frame`); an extension encoded whole as one clip (Krea `resume_latents`). `kind` "initial_latent":
    the start image alone -> 1 latent; an extension's last 1 + 4 (F m - 1) frames -> F m latents, m its most whole
    blocks (Self-Forcing `initial_latent`, which takes whole blocks)."""

    kind: str  # a key of ENCODINGS
    context_frames: int = 3
    decodes_given: bool = False  # the output decodes the given latents before block 0 (else: the pixels as read)

    def __post_init__(self):
        if self.kind not in ENCODINGS:
            raise ValueError(f"given encoding kind {self.kind!r} is not one of {sorted(ENCODINGS)}")

    def min_extension_frames(self, frames_per_block: int, temporal_compression: int) -> int:
        """Fewest frames of a video this encoding can extend from."""
        return ENCODINGS[self.kind].min_extension_frames(self, frames_per_block, temporal_compression)

    def encode(self, vae, pixels: PixelInput, run_hw: tuple[int, int], frames_per_block: int,
               interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, int]:
        """The given latents [1, g, C, h, w] of a start image or an extension, and the pixel frames they encode (the
        input read a piece at a time)."""
        rule, src, tc = ENCODINGS[self.kind], pixels.source, vae.config.temporal_compression
        if pixels.kind is StartImage:
            image = next(iter(src.pieces(run_hw, 0, 1)))[:, :, 0]  # [1, 3, H, W]
            return rule.start(vae, image, run_hw, self, interrupt), 1
        if pixels.kind.streamed:
            raise ValueError(f"{pixels.mode} has no given latents: its input is encoded block by block (InputVideo)")
        total = src.count()
        need = self.min_extension_frames(frames_per_block, tc)
        if total < need:
            raise PixelInputError(f"the video to extend has {total} frame(s); extending needs at least {need} "
                                  f"(one block of {frames_per_block} latent frames): give a longer video")
        start, used = rule.window(total, self, frames_per_block, tc)
        return encode_clip(vae, src.pieces(run_hw, start, start + used), run_hw, interrupt), used


def extension_window(total_frames: int, frames_per_block: int, temporal_compression: int) -> tuple[int, int]:
    """(first frame, frames) of an extension's last whole blocks: 1 + tc (F m - 1) frames, m = the most whole
    blocks of latents `total_frames` encode to (Self-Forcing takes given latents in whole blocks)."""
    latents = 1 + (total_frames - 1) // temporal_compression if total_frames > 0 else 0
    m = latents // frames_per_block
    if m == 0:
        need = block_frames(0, frames_per_block, temporal_compression)
        raise PixelInputError(f"the video to extend has {total_frames} frame(s); extending needs at least {need} "
                              f"(one block of {frames_per_block} latent frames): give a longer video")
    used = 1 + temporal_compression * (frames_per_block * m - 1)
    return total_frames - used, used


@dataclass(frozen=True)
class GivenLatents:
    """The given pixels of a run as its recipes use them. `latents[encoding]`: a start image's or an extension's
    latents [1, g, C, h, w] (CPU) per encoding the roles use; `decoded`: the encoding whose latents the output
    decodes before block 0 (None: the output begins with the pixels as read, or, for video-to-video, with block 0);
    `frames_used`: pixel frames of a start image / extension the latents encode; `account`: what encoding them cost
    when the run started (block 0's record carries it); `hidden_frames`: frames at the start of block 0's decode the
    output leaves out (given/pixels.py `RESTART_HIDDEN_FRAMES`)."""

    mode: str
    latents: dict = field(default_factory=dict)
    decoded: GivenEncoding | None = None
    frames_used: int = 0
    streamed: bool = False  # video-to-video: the input is read block by block as the run goes
    temporal_compression: int = 4
    frames_per_block: int = 3
    account: Account = field(default_factory=Account)
    hidden_frames: int = 0

    def of(self, encoding: GivenEncoding) -> torch.Tensor | None:
        return self.latents.get(encoding)

    @property
    def decode_prefix(self) -> torch.Tensor | None:
        """Latents the decoder runs through before block 0 (Self-Forcing / LongLive targets), else None."""
        return None if self.decoded is None else self.latents[self.decoded]

    def block_start(self, b: int) -> int:
        """The input frame block b of a video-to-video run starts at (on the run's clock)."""
        return frames_before(b, self.frames_per_block, self.temporal_compression)

    def block_frames(self, b: int) -> int:
        return block_frames(b, self.frames_per_block, self.temporal_compression)

    def pixel_frames(self, committed_blocks: int) -> int:
        """Input pixel frames the run used after `committed_blocks` blocks (the report's given_frames)."""
        if self.streamed:
            return self.block_start(committed_blocks)
        return self.frames_used


def given_latents(memoiser: Memoiser, vae, vae_key: str, pixels: PixelInput, run_hw: tuple[int, int],
                  encodings: tuple[GivenEncoding, ...], output: GivenEncoding, frames_per_block: int,
                  interrupt: Callable[[], None] | None = None, tally: Tally | None = None) -> GivenLatents:
    """Encode the given pixels for each role's encoding (memoised: a re-queue with the same pixels encodes nothing);
    `output` (the target's encoding) says what the output video begins with. `tally` records the work and time."""
    tc = vae.config.temporal_compression
    if pixels.kind.streamed:
        return GivenLatents(pixels.mode, streamed=True, temporal_compression=tc, frames_per_block=frames_per_block)
    tally = tally if tally is not None else Tally()
    latents, used = {}, {}
    with tally.phase("input"):
        for enc in dict.fromkeys(encodings + (output,)):
            key = GivenKey(vae_key, pixels.identity(), run_hw, enc, frames_per_block)
            latents[enc], used[enc] = memoiser.memoised(
                key, None, tally, lambda part, enc=enc: _encoded(vae, pixels, run_hw, enc, frames_per_block, interrupt,
                                                                  part))
    return GivenLatents(pixels.mode, latents, output if output.decodes_given else None, used[output],
                        temporal_compression=tc, frames_per_block=frames_per_block, account=tally.account())


def _encoded(vae, pixels, run_hw, enc: GivenEncoding, frames_per_block, interrupt, part: Tally) -> tuple[torch.Tensor, int]:
    latents, used = enc.encode(vae, pixels, run_hw, frames_per_block, interrupt)
    part.add("vae_encodes", 1)
    return latents.float().to("cpu"), used
