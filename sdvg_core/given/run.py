"""Given pixels as a run uses them: the latents a recipe's context starts from, the input video's blocks, and the
frames the output begins with (docs/pixels.md sections 4-5).

- A start image or a video to extend is encoded once, when the run starts, the way each recipe's reference does
  (`GivenEncoding`: Krea repeats a start image into `context_frames` latents and encodes an extension as one clip;
  Self-Forcing / LongLive take a 1-latent start frame, or an extension's last whole blocks). The results are
  memoised by (VAE, pixels, size, encoding) and carried in the state (`GivenLatents`): a few latent frames.
- A video to restyle is read as the run goes (`InputVideo`): block b's pixel frames (9 for block 0, then 12) are
  encoded continuing one causal encoder cache, memoised per block by (VAE, pixels, size, block) with the newest
  encoder cache held, so a run never holds the whole input; a block the input does not fill ends the run.
- `GivenPixels` is what the engine asks of all this: the plan a role denoises at, the given latents at start, a
  video-to-video block's first input, and where a short input ends the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import sys
from typing import Callable, Iterator

import torch

from .read import PixelInputError
from ..engine.keys import GivenKey, InputBlockKey
from ..engine.memo import Hold, Memoiser
from .request import PixelInput
from ..engine.schedule import StepPlan, noise_input
from ..engine.tally import Tally
from .encode import encode_clip, encode_start_frame

Interrupt = Callable[[], Callable[[], None] | None]


@dataclass(frozen=True)
class GivenEncoding:
    """How a recipe turns a start image or an extension into its context's latents (docs/pixels.md section 2).

    `kind` "krea": the start image repeated 1 + (context_frames - 1) * 4 times -> `context_frames` latents (Krea
    `setup_start_frame`); an extension encoded whole as one clip (Krea `resume_latents`). `kind` "initial_latent":
    the start image alone -> 1 latent; an extension's last 1 + 4 (F m - 1) frames -> F m latents, m its most whole
    blocks (Self-Forcing `initial_latent`, which takes whole blocks)."""

    kind: str  # "krea" | "initial_latent"
    context_frames: int = 3
    decodes_given: bool = False  # the output decodes the given latents before block 0 (else: the pixels as read)


def extension_window(total_frames: int, frames_per_block: int, temporal_compression: int) -> tuple[int, int]:
    """(first frame, frames) of an extension's last whole blocks: 1 + tc (F m - 1) frames, m = the most whole
    blocks of latents `total_frames` encode to (Self-Forcing takes given latents in whole blocks)."""
    latents = 1 + (total_frames - 1) // temporal_compression if total_frames > 0 else 0
    m = latents // frames_per_block
    if m == 0:
        need = 1 + temporal_compression * (frames_per_block - 1)
        raise PixelInputError(f"the video to extend has {total_frames} frame(s); extending needs at least {need} "
                              f"(one block of {frames_per_block} latent frames): give a longer video")
    used = 1 + temporal_compression * (frames_per_block * m - 1)
    return total_frames - used, used


def encode_given(vae, pixels: PixelInput, run_hw: tuple[int, int], encoding: GivenEncoding, frames_per_block: int,
                 interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, int]:
    """The given latents [1, g, C, h, w] of a start image or an extension for one encoding, and the pixel frames of
    the input they encode (read a piece at a time)."""
    src, tc = pixels.source, vae.config.temporal_compression
    if pixels.mode == "start_image":
        image = next(iter(src.pieces(run_hw, 0, 1)))[:, :, 0]  # [1, 3, H, W]
        if encoding.kind == "krea":
            return encode_start_frame(vae, image, run_hw, encoding.context_frames, interrupt), 1
        return encode_clip(vae, image.unsqueeze(2), run_hw, interrupt), 1
    if pixels.mode != "extend":
        raise ValueError(f"{pixels.mode} has no given latents: its input is encoded block by block (InputVideo)")
    total = src.count()
    if encoding.kind == "krea":
        latents = 1 + (total - 1) // tc
        if latents < encoding.context_frames:
            need = 1 + tc * (encoding.context_frames - 1)
            raise PixelInputError(f"the video to extend has {total} frame(s); Krea's context needs at least {need}: "
                                  f"give a longer video")
        used = 1 + tc * (latents - 1)
        return encode_clip(vae, src.pieces(run_hw, 0, used), run_hw, interrupt), used
    start, used = extension_window(total, frames_per_block, tc)
    return encode_clip(vae, src.pieces(run_hw, start, start + used), run_hw, interrupt), used


@dataclass(frozen=True)
class GivenLatents:
    """The given pixels of a run as its recipes use them. `latents[encoding]`: a start image's or an extension's
    latents [1, g, C, h, w] (CPU) per encoding the roles use; `decoded`: the encoding whose latents the output
    decodes before block 0 (None: the output begins with the pixels as read, or, for video-to-video, with block 0);
    `frames_used`: pixel frames of a start image / extension the latents encode."""

    mode: str
    latents: dict = field(default_factory=dict)
    decoded: GivenEncoding | None = None
    frames_used: int = 0
    first_block_frames: int = 0  # video_to_video: input pixel frames block 0 reads (then block_frames each)
    block_frames: int = 0

    def of(self, encoding: GivenEncoding) -> torch.Tensor | None:
        return self.latents.get(encoding)

    @property
    def decode_prefix(self) -> torch.Tensor | None:
        """Latents the decoder runs through before block 0 (Self-Forcing / LongLive targets), else None."""
        return None if self.decoded is None else self.latents[self.decoded]

    def pixel_frames(self, committed_blocks: int) -> int:
        """Input pixel frames the run used after `committed_blocks` blocks (the report's given_frames)."""
        if self.mode == "video_to_video":
            return 0 if committed_blocks == 0 else self.first_block_frames + self.block_frames * (committed_blocks - 1)
        return self.frames_used


def given_latents(memos: Memoiser, vae, vae_key: str, pixels: PixelInput, run_hw: tuple[int, int],
                  encodings: tuple[GivenEncoding, ...], output: GivenEncoding, frames_per_block: int,
                  interrupt: Callable[[], None] | None = None) -> GivenLatents:
    """Encode the given pixels for each role's encoding (memoised: a re-queue with the same pixels encodes nothing);
    `output` (the target's encoding) says what the output video begins with."""
    tc = vae.config.temporal_compression
    if pixels.mode == "video_to_video":
        return GivenLatents(pixels.mode, first_block_frames=1 + tc * (frames_per_block - 1),
                            block_frames=tc * frames_per_block)
    latents, used = {}, {}
    for enc in dict.fromkeys(encodings + (output,)):
        key = GivenKey(vae_key, pixels.identity(), run_hw, enc, frames_per_block)
        latents[enc], used[enc] = memos.memoised(
            key, None, Tally(), lambda part, enc=enc: _encoded(vae, pixels, run_hw, enc, frames_per_block, interrupt, part))
    return GivenLatents(pixels.mode, latents, output if output.decodes_given else None, used[output])


def _encoded(vae, pixels, run_hw, enc, frames_per_block, interrupt, part: Tally) -> tuple[torch.Tensor, int]:
    latents, used = encode_given(vae, pixels, run_hw, enc, frames_per_block, interrupt)
    part.add("vae_encodes", 1)
    return latents.float().to("cpu"), used


# ------------------------------------------------------------------------------------------------ video-to-video
@dataclass(frozen=True)
class InputBlock:
    """Block b of an input video: its latents [1, F, C, h, w] (CPU; None when the input ran out before the block
    filled) and the encoder cache after it."""

    latents: torch.Tensor | None
    cache: object  # models.vae.EncoderCache


class _Reader:
    """A frame source read forward from one position; asked for an earlier position, it starts again."""

    def __init__(self, pixels: PixelInput, run_hw: tuple[int, int]):
        self.pixels, self.run_hw = pixels, run_hw
        self.position, self._pieces, self._left = -1, iter(()), None  # opened at the first take

    def take(self, start: int, n: int) -> torch.Tensor | None:
        """Frames [start, start + n) as [1, 3, t, H, W] (t < n where the input ends; None when it has none)."""
        if start != self.position:
            self._pieces, self._left, self.position = iter(self.pixels.source.pieces(self.run_hw, start)), None, start
        got, have = [], 0
        while have < n:
            piece = self._left if self._left is not None else next(self._pieces, None)
            self._left = None
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
    """The input video of a video-to-video run, encoded block by block as the run goes (docs/pixels.md section 4:
    Krea's streaming encode, one encoder cache for the whole input)."""

    HEAD = Hold("input_head")  # the newest block's entry (its encoder cache continues the input)

    def __init__(self, vae, vae_key: str, memos: Memoiser, interrupt: Interrupt):
        self.vae, self.vae_key, self.memos, self._interrupt = vae, vae_key, memos, interrupt
        self._reader: _Reader | None = None

    def close(self) -> None:
        self._reader = None

    def _key(self, state, b: int) -> InputBlockKey:
        spec = state.spec
        return InputBlockKey(self.vae_key, spec.pixels.digest, (spec.height, spec.width), spec.frames_per_block, b)

    def block(self, state, b: int, tally: Tally) -> torch.Tensor | None:
        """Block b's input latents [1, F, C, h, w] on the CPU, or None when the input ends before block b fills.
        Encoded once per block whichever role asks first (a fresh run's work too: not recorded as a reuse)."""
        j = b
        while j >= 0 and self.memos.peek(self._key(state, j)) is None:
            j -= 1
        entry = self.memos.peek(self._key(state, j)) if j >= 0 else None
        for k in range(j + 1, b + 1):
            if k > 0 and (entry is None or entry.latents is None):
                break
            entry = self.memos.memoised(self._key(state, k), None, tally,
                                        lambda part, k=k, prev=entry: self._encode(state, k, prev, part), hold=self.HEAD)
        return entry.latents if entry is not None else None

    def _encode(self, state, b: int, prev: InputBlock | None, part: Tally) -> InputBlock:
        given: GivenLatents = state.given
        spec = state.spec
        start = 0 if b == 0 else given.first_block_frames + given.block_frames * (b - 1)
        n = given.first_block_frames if b == 0 else given.block_frames
        if self._reader is None or self._reader.pixels.digest != spec.pixels.digest:
            self._reader = _Reader(spec.pixels, (spec.height, spec.width))
        frames = self._reader.take(start, n)
        if frames is None or frames.shape[2] < n:
            return InputBlock(None, None)
        latents, cache = self.vae.encode_stream(frames.to(self.vae.device), None if prev is None else prev.cache,
                                                self._interrupt())
        part.add("vae_encodes", 1)
        return InputBlock(latents.permute(0, 2, 1, 3, 4).float().to("cpu"), cache)


def given_output(vae, state, rule: str, interrupt: Callable[[], None] | None = None) -> Iterator[torch.Tensor]:
    """The pixels the output video begins with, [1, 3, t, H, W] pieces in [-1, 1]: the given latents decoded
    (Self-Forcing / LongLive targets: the decoder runs through them, as their references decode `output`) or the
    given pixels as read (Krea, whose decoder starts at the first generated block); none for video-to-video."""
    given: GivenLatents | None = state.given
    if given is None or given.mode == "video_to_video":
        return
    spec = state.spec
    prefix = given.decode_prefix
    if prefix is not None:
        cache, F = None, spec.frames_per_block
        for s in range(0, prefix.shape[1], F):
            z = prefix[:, s:s + F].to(vae.device).permute(0, 2, 1, 3, 4)  # [1, C, f, h, w]
            pixels, cache = vae.decode_stream(z, cache, rule=rule, interrupt=interrupt)
            yield pixels.clamp(-1, 1).cpu()
        return
    yield from spec.pixels.source.pieces((spec.height, spec.width), 0, given.frames_used)


class GivenPixels:
    """The engine's view of a run's given pixels (none for text-to-video): the step plan each role denoises at, the
    latents encoded at start, each video-to-video block's noised input, and the stop where the input ends."""

    def __init__(self, vae, vae_key: str, memos: Memoiser, recipes: dict, interrupt: Interrupt):
        self.vae, self.vae_key, self.memos, self.recipes = vae, vae_key, memos, recipes
        self._interrupt = interrupt
        self.inputs = InputVideo(vae, vae_key, memos, interrupt)

    def plan_for(self, spec, role: str) -> StepPlan:
        """The role's recipe's plan, or for video-to-video the plan from the strength (Krea's truncated schedule;
        Self-Forcing's trained steps from the strength on)."""
        recipe = self.recipes[role]
        if spec.pixels is None or spec.pixels.mode != "video_to_video":
            return recipe.plan
        return recipe.strength_plan(spec.pixels.strength)

    def start(self, spec) -> GivenLatents | None:
        """The given latents of a new run (None for text-to-video); a strength a role's recipe cannot start from
        is refused before any work."""
        self.close()
        if spec.pixels is None:
            return None
        for role in self.recipes:
            self.plan_for(spec, role)
        return given_latents(self.memos, self.vae, self.vae_key, spec.pixels, (spec.height, spec.width),
                             tuple(r.given_encoding for r in self.recipes.values()),
                             self.recipes["target"].given_encoding, spec.frames_per_block, self._interrupt())

    def first_input(self, state, b: int, initial: torch.Tensor, plan: StepPlan, part: Tally) -> torch.Tensor:
        """What block b's first call denoises: its noise, or for video-to-video its input noised to the plan's first
        step with the block's own initial draw (drafter and target start from the same input; docs/pixels.md §4)."""
        if state.spec.pixels is None or state.spec.pixels.mode != "video_to_video":
            return initial
        return noise_input(self.inputs.block(state, b, part).to(initial.device), initial, plan)

    def stopped(self, state, tally: Tally):
        """The state, ended here when block state.next_block has no input (a video-to-video input that ran out):
        the run ends with the blocks it has, and says so (the report's `stopped`, and stderr)."""
        spec = state.spec
        if state.done or spec.pixels is None or spec.pixels.mode != "video_to_video":
            return state
        b = state.next_block
        if self.inputs.block(state, b, tally) is not None:
            return state
        why = (f"the input video ends before block {b} ({state.given.pixel_frames(b + 1)} input frames needed): the "
               f"run ends after {b} of {spec.num_blocks} block(s)")
        print(f"SDVG: {why}", file=sys.stderr)
        return state.stop(why)

    def close(self) -> None:
        """Forget the input reader (the run ended, or a new one starts)."""
        self.inputs.close()
