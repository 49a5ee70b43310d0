"""Prompts and the prompt schedule: which prompt each block of a video is generated, committed and scored under.

`PromptSchedule` is the one shape of a schedule everywhere: entries (first block, prompt) by increasing first block,
the first at block 0, a block under the last entry starting at or before it. Its prompts are text (and maybe an
embeddings file) when read from a file (engine/prompt_schedule.py), `PromptConditioning` (text + umT5 embeddings)
once encoded, as `GenerationSpec` holds it. A single prompt is the schedule of one entry.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, TypeVar

import torch

from ..derived.digest import tensor_digest

P = TypeVar("P")
Q = TypeVar("Q")


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
        return PromptConditioning(text, embeddings, tensor_digest(embeddings, text))


@dataclass(frozen=True)
class ScheduleEntry(Generic[P]):
    """One entry of a schedule: `prompt` from block `first_block` on. Unpacks as (first_block, prompt)."""

    first_block: int
    prompt: P

    def __iter__(self) -> Iterator:
        return iter((self.first_block, self.prompt))


@dataclass(frozen=True)
class PromptSchedule(Generic[P]):
    """Entries by increasing first block, the first at block 0 (checked when made)."""

    entries: tuple[ScheduleEntry[P], ...]

    def __post_init__(self):
        entries = tuple(e if isinstance(e, ScheduleEntry) else ScheduleEntry(int(e[0]), e[1]) for e in self.entries)
        object.__setattr__(self, "entries", entries)
        if not entries:
            raise ValueError("the prompt schedule is empty: give at least one prompt")
        if entries[0].first_block != 0:
            first = entries[0].first_block
            raise ValueError(f"the prompt schedule must start at block 0 (its first entry starts at block {first}): "
                             f"which prompt would blocks 0..{first - 1} have?")
        for i, (prev, cur) in enumerate(zip(entries, entries[1:]), 1):
            if cur.first_block <= prev.first_block:
                raise ValueError(f"prompt schedule entry {i} (block {cur.first_block}): first blocks must increase "
                                 f"(the entry before starts at block {prev.first_block})")

    @staticmethod
    def one(prompt: P) -> "PromptSchedule[P]":
        """One prompt for the whole video."""
        return PromptSchedule((ScheduleEntry(0, prompt),))

    @staticmethod
    def of(pairs: Iterable[tuple[int, P]]) -> "PromptSchedule[P]":
        """A schedule from (first block, prompt) pairs."""
        return PromptSchedule(tuple(ScheduleEntry(int(b), p) for b, p in pairs))

    def then(self, first_block: int, prompt: P) -> "PromptSchedule[P]":
        """This schedule with one more entry after its last."""
        return PromptSchedule(self.entries + (ScheduleEntry(first_block, prompt),))

    def __iter__(self) -> Iterator[ScheduleEntry[P]]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> ScheduleEntry[P]:
        return self.entries[i]

    @property
    def first(self) -> P:
        """Block 0's prompt."""
        return self.entries[0].prompt

    @property
    def switches(self) -> tuple[ScheduleEntry[P], ...]:
        """The entries after the first: where the prompt changes."""
        return self.entries[1:]

    def segment_of(self, b: int) -> int:
        """Index of the entry block b belongs to."""
        return bisect.bisect_right([e.first_block for e in self.entries[1:]], b)

    def at(self, b: int) -> P:
        """The prompt of block b."""
        return self.entries[self.segment_of(b)].prompt

    def map(self, fn: Callable[[P], Q]) -> "PromptSchedule[Q]":
        """The same first blocks with `fn(prompt)` as prompts (e.g. text -> encoded)."""
        return PromptSchedule(tuple(ScheduleEntry(e.first_block, fn(e.prompt)) for e in self.entries))


def check_conditioning(schedule: PromptSchedule[PromptConditioning], num_blocks: int) -> None:
    """Refuse, before any work, a schedule that starts past the end of the video, whose prompt is empty or whose
    embeddings differ in width (each names the entry)."""
    width = schedule.first.embeddings.shape[-1]
    for i, (first, p) in enumerate(schedule):
        where = f"prompt schedule entry {i} (block {first})"
        if first >= num_blocks:
            raise ValueError(f"{where}: starts past the end of the video (blocks 0..{num_blocks - 1})")
        if len(schedule) > 1 and not p.text.strip():  # a schedule's prompts are scored and shown by their text
            raise ValueError(f"{where}: the prompt is empty")
        if p.embeddings.shape[-1] != width:
            raise ValueError(f"{where}: embeddings are {p.embeddings.shape[-1]} wide, block 0's are {width} (every "
                             f"prompt must come from the same text encoder)")
