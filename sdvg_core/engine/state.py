"""Immutable generation state: what was committed, by whom, why, and at what cost.

A `GenerationState` never changes after creation; every engine operation returns a new one. Its `lineage`
(a hash chain over the committed blocks) names the history, and derived data (KV caches, decoder caches)
is looked up by it, never stored in the state.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import torch

from ..derived.digest import tensor_digest
from .prompts import PromptConditioning, PromptSchedule, check_conditioning  # noqa: F401 (re-exported)
from ..derived.tally import Account, Counts

if TYPE_CHECKING:
    from ..given.latents import GivenLatents
    from ..given.request import PixelInput

Producer = Literal["drafter", "target"]
Decision = Literal["accepted", "rejected", "forced"]  # forced: rejected without drafting (block 0 / target-only)

LATENT_SPATIAL = 8  # Wan 2.1 VAE: 8x8 pixels per latent
LATENT_TEMPORAL = 4  # Wan 2.1 VAE: 4 pixel frames per latent frame after the first (1 + 4 (T - 1) frames)
PATCH_SPATIAL = 2  # Wan 2.1 DiT patch (1, 2, 2)
SIZE_MULTIPLE = LATENT_SPATIAL * PATCH_SPATIAL  # width/height must be multiples of 16
# The longest video a front end accepts (the command lines, the nodes' num_blocks bound; ~2 h at 16 fps). The engine
# and the recipes have no limit of their own; this catches a typo before a run of hours starts.
MAX_BLOCKS = 10_000
# the same bound in frames (--frames, SDVG Generate's `frames`): MAX_BLOCKS whole 3-frame blocks, 1 + 4 (3 N - 1)
# frames (the Wan VAE's 4x time compression)
MAX_FRAMES = 1 + LATENT_TEMPORAL * (3 * MAX_BLOCKS - 1)


@dataclass(frozen=True)
class GenerationSpec:
    """What to generate: a prompt schedule (or one prompt), pixel size, number of blocks, seed, frames per block.

    Block b is generated, committed and scored under `schedule.at(b)`; a single prompt is the schedule of one entry.
    `pixels`: given pixels the run starts from (a start image, a video to extend or to restyle; docs/pixels.md);
    None is text-to-video. `latent_frames`: the latent frames of the generated blocks in all, when the last block is
    shorter than `frames_per_block` (ComfyUI core's AR loop runs a shorter last block: 7 frames in blocks of 3 are
    3 + 3 + 1); None: every block is whole. Every block but the last is whole, so block b starts at latent frame
    b * frames_per_block (`block_start`) and holds `block_frames(b)` frames.
    """

    schedule: PromptSchedule[PromptConditioning]
    width: int
    height: int
    num_blocks: int
    seed: int
    frames_per_block: int = 3  # latent frames per block (Self-Forcing / Krea)
    pixels: "PixelInput | None" = None
    latent_frames: int | None = None  # None: num_blocks * frames_per_block (see the docstring)

    def __post_init__(self):
        if isinstance(self.schedule, PromptConditioning):
            object.__setattr__(self, "schedule", PromptSchedule.one(self.schedule))
        if not isinstance(self.schedule, PromptSchedule):
            raise TypeError(f"GenerationSpec takes a PromptConditioning or a PromptSchedule of them, got "
                            f"{type(self.schedule).__name__} (make one with PromptSchedule.of([(0, prompt), ...]))")
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        if self.frames_per_block < 1:
            raise ValueError(f"frames_per_block must be >= 1, got {self.frames_per_block}")
        if self.latent_frames is not None:
            F, n = self.frames_per_block, self.num_blocks
            if not (n - 1) * F < self.latent_frames <= n * F:
                raise ValueError(f"{self.latent_frames} latent frames do not make {n} block(s) of {F} (the last one "
                                 f"1..{F}): they make {blocks_for(self.latent_frames, F)}; set num_blocks to that")
            if self.latent_frames == n * F:  # whole blocks: one spelling (and one identity) for one request
                object.__setattr__(self, "latent_frames", None)
        for name, v in (("width", self.width), ("height", self.height)):
            if v <= 0 or v % SIZE_MULTIPLE:
                raise ValueError(f"{name} {v} is not a positive multiple of {SIZE_MULTIPLE} "
                                 f"(8x VAE downsampling x 2x DiT patch); try {max(SIZE_MULTIPLE, round(v / SIZE_MULTIPLE) * SIZE_MULTIPLE)}")
        check_conditioning(self.schedule, self.num_blocks)
        if self.pixels is not None:
            from ..given.request import PixelInput

            if not isinstance(self.pixels, PixelInput):
                raise TypeError(f"GenerationSpec.pixels takes a PixelInput (PixelInput.start_image(...), .extend(...), "
                                f".video_to_video(...)), got {type(self.pixels).__name__}")
            self.pixels.check_fit((self.height, self.width))
            if self.latent_frames is not None and self.pixels.kind.streamed:
                raise ValueError(f"video-to-video reads its input a whole block at a time; {self.latent_frames} "
                                 f"latent frames end in a block of {self.block_frames(self.num_blocks - 1)}: ask for "
                                 f"whole blocks of {self.frames_per_block} ({self.num_blocks - 1} or "
                                 f"{self.num_blocks} blocks)")

    @classmethod
    def for_frames(cls, schedule, width: int, height: int, frames: int, seed: int, frames_per_block: int = 3,
                   pixels: "PixelInput | None" = None) -> "GenerationSpec":
        """The spec whose blocks make a video of `frames` pixel frames: (frames - 1) // 4 + 1 latent frames (ComfyUI's
        video latent rule), in blocks of `frames_per_block`, the last one shorter where they do not divide (81 -> 21
        latent frames = 7 blocks of 3; 25 -> 7 = 3 + 3 + 1)."""
        latent = latent_frames_for(frames)
        return cls(schedule, width, height, blocks_for(latent, frames_per_block), seed, frames_per_block, pixels,
                   latent_frames=latent)

    @property
    def prompt(self) -> PromptConditioning:
        """Block 0's prompt."""
        return self.schedule.first

    def segment_of(self, b: int) -> int:
        """Index in `schedule` of the entry block b belongs to."""
        return self.schedule.segment_of(b)

    def prompt_at(self, b: int) -> PromptConditioning:
        """The prompt block b is generated, committed and scored under."""
        return self.schedule.at(b)

    @property
    def latent_hw(self) -> tuple[int, int]:
        return self.height // LATENT_SPATIAL, self.width // LATENT_SPATIAL

    @property
    def num_latent_frames(self) -> int:
        """Latent frames of the generated blocks (given latents not counted)."""
        return self.num_blocks * self.frames_per_block if self.latent_frames is None else self.latent_frames

    def block_start(self, b: int) -> int:
        """The generated latent frame block b starts at (every block before it is whole)."""
        return b * self.frames_per_block

    def block_frames(self, b: int) -> int:
        """Latent frames of block b: frames_per_block, the last block what is left (1..frames_per_block)."""
        if not 0 <= b < self.num_blocks:
            raise ValueError(f"block {b} is not one of the {self.num_blocks} block(s)")
        return min(self.frames_per_block, self.num_latent_frames - self.block_start(b))

    def frames_before(self, b: int) -> int:
        """Latent frames of blocks 0 .. b-1."""
        return min(self.block_start(b), self.num_latent_frames)

    def identity(self) -> str:
        """What the root lineage names: the prompt, size, blocks (and a short last block's length), seed and the given
        pixels (mode, strength, digest); text-to-video's identity is unchanged by the pixels field."""
        base = f"{self.prompt.key}|{self.width}x{self.height}|{self.num_blocks}x{self.frames_per_block}|seed{self.seed}"
        if self.latent_frames is not None:
            base = f"{base}|latent_frames{self.latent_frames}"
        return base if self.pixels is None else f"{base}|pixels:{self.pixels.identity()}"


class Accounted:
    """The account's fields read directly off a record or pending block (`record.work["target_forwards"]`)."""

    account: Account

    @property
    def work(self) -> Counts:
        """Work computed by this call: drafter_forwards, target_forwards, vae_decode_frames, ..."""
        return self.account.work

    @property
    def cost(self) -> Counts:
        """Work the block takes in a fresh run (work + results reused from the memo)."""
        return self.account.cost

    @property
    def seconds(self) -> Counts:
        """Per phase: context, draft, decode, score, target."""
        return self.account.seconds

    @property
    def reused(self) -> tuple[str, ...]:
        """Derived results taken from the memo instead of recomputed."""
        return self.account.reused

    @property
    def carried(self) -> tuple[str, ...]:
        """The reused results an earlier execution computed (not a fresh run's time)."""
        return self.account.carried


@dataclass(frozen=True)
class BlockRecord(Accounted):
    """One committed block: latents [1, F, C, h, w] (float32), who made it and the evidence for the decision."""

    index: int
    latents: torch.Tensor
    producer: Producer
    decision: Decision
    score: float | None  # aggregated (min or mean) draft score, None when nothing was scored
    frame_scores: tuple[float, ...]
    account: Account  # work, cost, seconds, reused and carried of every operation on the block
    lineage: str  # lineage after committing this block
    run_id: str = ""  # the execution that computed this record (the host's run id, or one the engine made)

    def __post_init__(self):
        object.__setattr__(self, "frame_scores", tuple(self.frame_scores))


@dataclass(frozen=True)
class PendingBlock(Accounted):
    """A draft in flight (between the draft, decode, score and route operations) and what they cost so far."""

    index: int
    latents: torch.Tensor | None = None  # drafter output [1, F, C, h, w]
    frames: torch.Tensor | None = None  # decoded draft frames [T, H, W, 3] in 0..1
    frame_scores: tuple[float, ...] | None = None
    account: Account = Account()

    def then(self, account: Account, **done) -> "PendingBlock":
        """This pending block after one more operation: its results (`latents`, `frames`, `frame_scores`) and
        account added."""
        return replace(self, account=self.account + account, **done)


@dataclass(frozen=True)
class GenerationState:
    spec: GenerationSpec
    blocks: tuple[BlockRecord, ...] = ()
    pending: PendingBlock | None = None
    given: "GivenLatents | None" = None  # the given pixels as the run's recipes use them (given/latents.py)
    stopped: str | None = None  # why the run ended before spec.num_blocks (an input video ran out, or broke)
    stop_cause: str | None = None  # what ended it: "input_ended" / "input_unreadable" (given/pixels.py)

    @property
    def lineage(self) -> str:
        return self.blocks[-1].lineage if self.blocks else root_lineage(self.spec)

    @property
    def next_block(self) -> int:
        return len(self.blocks)

    @property
    def done(self) -> bool:
        return self.stopped is not None or len(self.blocks) >= self.spec.num_blocks

    @property
    def given_frames(self) -> int:
        """Pixel frames of the given input the run used (0 for text-to-video)."""
        return 0 if self.given is None else self.given.pixel_frames(len(self.blocks))

    def lineage_at(self, b: int) -> str:
        """Lineage of the history before block b (the first b committed blocks)."""
        return self.blocks[b - 1].lineage if b > 0 else root_lineage(self.spec)

    def committed_latents(self) -> torch.Tensor:
        """All committed latents [1, T, C, h, w] (a copy of the whole video: prefer `latent_frames`)."""
        return torch.cat([b.latents for b in self.blocks], dim=1)

    def latent_frames(self, start: int, end: int) -> torch.Tensor:
        """Committed latent frames [start, end) -> [1, end - start, C, h, w], touching only the blocks they are in
        (so a recipe's cost per block does not grow with the video's length)."""
        F, committed = self.spec.frames_per_block, self.spec.frames_before(len(self.blocks))
        if not 0 <= start < end <= committed:
            raise ValueError(f"latent frames [{start}, {end}) are not all committed ({committed} are)")
        parts = [self.blocks[k].latents[:, max(start - k * F, 0):min(end - k * F, F)]
                 for k in range(start // F, (end - 1) // F + 1)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def with_pending(self, pending: PendingBlock | None) -> "GenerationState":
        return replace(self, pending=pending)

    def commit(self, record: BlockRecord) -> "GenerationState":
        return replace(self, blocks=self.blocks + (record,), pending=None)

    def stop(self, why: str, cause: str | None = None) -> "GenerationState":
        """The run ends here (before spec.num_blocks), saying why (and, for a program, what: `cause`)."""
        return replace(self, pending=None, stopped=why, stop_cause=cause)


def latent_frames_for(frames: int) -> int:
    """Latent frames of a video of `frames` pixel frames, as ComfyUI's video latent nodes count them:
    (frames - 1) // 4 + 1 (a video of 1 + 4 (T - 1) frames decodes from T)."""
    if frames < 1:
        raise ValueError(f"a video has at least 1 frame, got {frames}")
    return (frames - 1) // LATENT_TEMPORAL + 1


def blocks_for(latent_frames: int, frames_per_block: int) -> int:
    """Blocks of `frames_per_block` that hold `latent_frames` (the last one possibly shorter), as core's AR loop
    counts them (a ceiling division)."""
    if latent_frames < 1 or frames_per_block < 1:
        raise ValueError(f"need at least 1 latent frame and 1 frame per block, got {latent_frames} and "
                         f"{frames_per_block}")
    return -(-latent_frames // frames_per_block)


def root_lineage(spec: GenerationSpec) -> str:
    return hashlib.blake2b(("sdvg-root|" + spec.identity()).encode(), digest_size=16).hexdigest()


def extend_lineage(parent: str, latents: torch.Tensor, producer: str, prompt_key: str) -> str:
    """Hash chain: the parent lineage, who produced the block, under which prompt, and the block's latent bytes."""
    return tensor_digest(latents, parent, producer, prompt_key)
