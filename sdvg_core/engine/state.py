"""Immutable generation state: what was committed, by whom, why, and at what cost.

A `GenerationState` never changes after creation; every engine operation returns a new one. Its `lineage`
(a hash chain over the committed blocks) names the history, and derived data (KV caches, decoder caches)
is looked up by it, never stored in the state.
"""
from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, replace
from typing import Literal

import torch

from .tally import Account, Counts

Producer = Literal["drafter", "target"]
Decision = Literal["accepted", "rejected", "forced"]  # forced: rejected without drafting (block 0 / target-only)

LATENT_SPATIAL = 8  # Wan 2.1 VAE: 8x8 pixels per latent
PATCH_SPATIAL = 2  # Wan 2.1 DiT patch (1, 2, 2)
SIZE_MULTIPLE = LATENT_SPATIAL * PATCH_SPATIAL  # width/height must be multiples of 16


@dataclass(frozen=True)
class PromptConditioning:
    """The prompt text (for ImageReward) and its umT5 embeddings [1, L, text_dim] (for both DiTs).

    `key` identifies the embeddings (a content hash) so per-prompt caches can be shared; the tensor is a
    handle, never copied by the state.
    """

    text: str
    embeddings: torch.Tensor
    key: str

    @staticmethod
    def make(text: str, embeddings: torch.Tensor) -> "PromptConditioning":
        if embeddings.dim() == 2:
            embeddings = embeddings[None]
        if embeddings.dim() != 3 or embeddings.shape[0] != 1:
            raise ValueError(f"prompt embeddings must be [1, L, D], got {list(embeddings.shape)}")
        if not torch.isfinite(embeddings).all():
            raise ValueError("prompt embeddings contain NaN or Inf")
        return PromptConditioning(text, embeddings, _tensor_digest(embeddings, text))


def _tensor_digest(t: torch.Tensor, *extra: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    c = t.detach().to("cpu").contiguous()
    h.update(str((c.dtype, tuple(c.shape))).encode())
    h.update(c.view(torch.uint8).numpy().tobytes() if c.numel() else b"")
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()


@dataclass(frozen=True)
class GenerationSpec:
    """What to generate: a prompt schedule, pixel size, number of blocks, seed, frames per block.

    `prompt` is block 0's prompt; `switches` holds the later entries of the schedule as (first block, prompt),
    first blocks increasing: block b is generated, committed and scored under the last entry starting at or
    before it. A single prompt is the schedule with no switch.
    """

    prompt: PromptConditioning
    width: int
    height: int
    num_blocks: int
    seed: int
    frames_per_block: int = 3  # latent frames per block (Self-Forcing / Krea)
    switches: tuple[tuple[int, PromptConditioning], ...] = ()

    def __post_init__(self):
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        if self.frames_per_block < 1:
            raise ValueError(f"frames_per_block must be >= 1, got {self.frames_per_block}")
        for name, v in (("width", self.width), ("height", self.height)):
            if v <= 0 or v % SIZE_MULTIPLE:
                raise ValueError(f"{name} {v} is not a positive multiple of {SIZE_MULTIPLE} "
                                 f"(8x VAE downsampling x 2x DiT patch); try {max(SIZE_MULTIPLE, round(v / SIZE_MULTIPLE) * SIZE_MULTIPLE)}")
        object.__setattr__(self, "switches", tuple((int(b), p) for b, p in self.switches))
        check_schedule(self.schedule, self.num_blocks)

    @staticmethod
    def from_schedule(schedule, width: int, height: int, num_blocks: int, seed: int,
                      frames_per_block: int = 3) -> "GenerationSpec":
        """A spec from a whole schedule [(first block, prompt), ...] whose first entry starts at block 0."""
        entries = [(int(b), p) for b, p in schedule]
        if not entries:
            raise ValueError("the prompt schedule is empty: give at least one prompt")
        if entries[0][0] != 0:
            raise ValueError(f"the prompt schedule must start at block 0 (its first entry starts at block "
                             f"{entries[0][0]}): which prompt would blocks 0..{entries[0][0] - 1} have?")
        return GenerationSpec(entries[0][1], width, height, num_blocks, seed, frames_per_block, tuple(entries[1:]))

    @property
    def schedule(self) -> tuple[tuple[int, PromptConditioning], ...]:
        """Every entry, block 0's first: ((0, prompt), (first block, prompt), ...)."""
        return ((0, self.prompt),) + self.switches

    def segment_of(self, b: int) -> int:
        """Index in `schedule` of the entry block b belongs to."""
        return bisect.bisect_right([first for first, _ in self.switches], b)

    def prompt_at(self, b: int) -> PromptConditioning:
        """The prompt block b is generated, committed and scored under."""
        return self.schedule[self.segment_of(b)][1]

    @property
    def latent_hw(self) -> tuple[int, int]:
        return self.height // LATENT_SPATIAL, self.width // LATENT_SPATIAL

    @property
    def num_latent_frames(self) -> int:
        return self.num_blocks * self.frames_per_block

    def identity(self) -> str:
        return f"{self.prompt.key}|{self.width}x{self.height}|{self.num_blocks}x{self.frames_per_block}|seed{self.seed}"


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

    @property
    def lineage(self) -> str:
        return self.blocks[-1].lineage if self.blocks else root_lineage(self.spec)

    @property
    def next_block(self) -> int:
        return len(self.blocks)

    @property
    def done(self) -> bool:
        return len(self.blocks) >= self.spec.num_blocks

    def lineage_at(self, b: int) -> str:
        """Lineage of the history before block b (the first b committed blocks)."""
        return self.blocks[b - 1].lineage if b > 0 else root_lineage(self.spec)

    def committed_latents(self) -> torch.Tensor:
        """All committed latents [1, T, C, h, w] (a copy of the whole video: prefer `latent_frames`)."""
        return torch.cat([b.latents for b in self.blocks], dim=1)

    def latent_frames(self, start: int, end: int) -> torch.Tensor:
        """Committed latent frames [start, end) -> [1, end - start, C, h, w], touching only the blocks they are in
        (so a recipe's cost per block does not grow with the video's length)."""
        F = self.spec.frames_per_block
        if not 0 <= start < end <= len(self.blocks) * F:
            raise ValueError(f"latent frames [{start}, {end}) are not all committed ({len(self.blocks) * F} are)")
        parts = [self.blocks[k].latents[:, max(start - k * F, 0):min(end - k * F, F)]
                 for k in range(start // F, (end - 1) // F + 1)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def with_pending(self, pending: PendingBlock | None) -> "GenerationState":
        return replace(self, pending=pending)

    def commit(self, record: BlockRecord) -> "GenerationState":
        return GenerationState(self.spec, self.blocks + (record,), None)


def check_schedule(schedule, num_blocks: int) -> None:
    """Refuse, before any work, a schedule whose first blocks do not increase, start past the end, whose prompt is
    empty or whose embeddings differ in width (each names the entry)."""
    width = schedule[0][1].embeddings.shape[-1]
    previous = -1
    for i, (first, p) in enumerate(schedule):
        where = f"prompt schedule entry {i} (block {first})"
        if first <= previous:
            raise ValueError(f"{where}: first blocks must increase (the entry before starts at block {previous})")
        if first >= num_blocks:
            raise ValueError(f"{where}: starts past the end of the video (blocks 0..{num_blocks - 1})")
        if len(schedule) > 1 and not p.text.strip():  # a schedule's prompts are scored and shown by their text
            raise ValueError(f"{where}: the prompt is empty")
        if p.embeddings.shape[-1] != width:
            raise ValueError(f"{where}: embeddings are {p.embeddings.shape[-1]} wide, block 0's are {width} (every "
                             f"prompt must come from the same text encoder)")
        previous = first


def root_lineage(spec: GenerationSpec) -> str:
    return hashlib.blake2b(("sdvg-root|" + spec.identity()).encode(), digest_size=16).hexdigest()


def extend_lineage(parent: str, latents: torch.Tensor, producer: str, prompt_key: str) -> str:
    """Hash chain: the parent lineage, who produced the block, under which prompt, and the block's latent bytes."""
    return _tensor_digest(latents, parent, producer, prompt_key)
