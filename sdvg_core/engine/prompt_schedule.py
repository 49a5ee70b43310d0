"""Prompt-schedule files: which prompt each block of a long video is generated under.

Two forms, told apart by the first non-blank character:
- JSON: a list of `{"block": n, "prompt": "...", "embeddings": "optional/file.safetensors"}`;
- text: one `n: prompt` line per entry (blank lines and lines starting with `#` are skipped).
First blocks must start at 0 and increase; every problem names the file and the entry or line. A file reads as a
`PromptSchedule` (the one schedule shape, engine/prompts.py) of `PromptSource`s; turning them into conditioning
(from a file, from umT5, or the tiny demo's stand-ins) is the caller's choice: `encode_schedule` takes a function
text -> embeddings.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .prompts import PromptConditioning, PromptSchedule, ScheduleEntry

LINE = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")


class ScheduleError(ValueError):
    """A schedule file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class PromptSource:
    """A schedule entry's prompt as a file gives it: the text, and maybe a saved embeddings file for it (else the
    caller encodes `text`)."""

    text: str
    embeddings: Path | None = None


def parse_schedule(text: str, source: str = "<schedule>") -> PromptSchedule[PromptSource]:
    """The schedule of a file's text, checked: non-empty prompts, first blocks from 0, increasing."""
    body = text.strip()
    if not body:
        raise ScheduleError(f"{source}: the prompt schedule is empty (give `0: first prompt` lines or a JSON list)")
    entries = _parse_json(body, source) if body[0] in "[{" else _parse_lines(text, source)
    if entries[0].first_block != 0:
        raise ScheduleError(f"{source}: the first entry starts at block {entries[0].first_block}; the schedule must "
                            f"start at block 0")
    for prev, cur in zip(entries, entries[1:]):
        if cur.first_block <= prev.first_block:
            raise ScheduleError(f"{source}: first blocks must increase ({cur.first_block} after {prev.first_block})")
    return PromptSchedule(tuple(entries))


def _parse_json(body: str, source: str) -> list[ScheduleEntry[PromptSource]]:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"{source}: not valid JSON ({e}); give a list of {{\"block\": n, \"prompt\": ...}}") from e
    if not isinstance(data, list) or not data:
        raise ScheduleError(f"{source}: the JSON must be a non-empty list of {{\"block\": n, \"prompt\": ...}}")
    out = []
    for i, item in enumerate(data):
        where = f"{source}: entry {i}"
        if not isinstance(item, dict) or "block" not in item or "prompt" not in item:
            raise ScheduleError(f"{where}: needs \"block\" and \"prompt\" (got {item!r:.80})")
        block, prompt = item["block"], item["prompt"]
        if isinstance(block, bool) or not isinstance(block, int) or block < 0:
            raise ScheduleError(f"{where}: block must be a whole number >= 0, got {block!r}")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScheduleError(f"{where}: the prompt is empty")
        emb = item.get("embeddings")
        out.append(ScheduleEntry(block, PromptSource(prompt.strip(), Path(emb).expanduser() if emb else None)))
    return out


def _parse_lines(text: str, source: str) -> list[ScheduleEntry[PromptSource]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = LINE.match(line)
        if m is None:
            raise ScheduleError(f"{source}:{n}: expected `block: prompt` (e.g. `12: the fox jumps`), got {line.strip()!r:.80}")
        if not m.group(2):
            raise ScheduleError(f"{source}:{n}: the prompt is empty")
        out.append(ScheduleEntry(int(m.group(1)), PromptSource(m.group(2))))
    if not out:
        raise ScheduleError(f"{source}: the prompt schedule is empty (only blank or comment lines)")
    return out


def read_schedule(path: str | os.PathLike) -> PromptSchedule[PromptSource]:
    """Read and check a schedule file; embeddings paths in it are relative to the file's folder."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ScheduleError(f"{p}: prompt schedule file not found")
    return parse_schedule(p.read_text(encoding="utf-8"), str(p)).map(
        lambda s: s if s.embeddings is None or s.embeddings.is_absolute() else PromptSource(s.text, p.parent / s.embeddings))


def encode_schedule(schedule: PromptSchedule[PromptSource], encode: Callable[[str], torch.Tensor],
                    load: Callable[[Path], torch.Tensor] | None = None) -> PromptSchedule[PromptConditioning]:
    """The schedule with each prompt's conditioning: its embeddings file's when it names one (read by `load`), else
    `encode(text)`; a prompt used twice is encoded once."""
    encoded: dict[str, torch.Tensor] = {}

    def conditioning(e: ScheduleEntry[PromptSource]) -> tuple[int, PromptConditioning]:
        src = e.prompt
        if src.embeddings is not None:
            if load is None:
                raise ScheduleError(f"entry at block {e.first_block} names an embeddings file, but no loader was given")
            emb = load(src.embeddings)
        else:
            emb = encoded.get(src.text)
            if emb is None:
                emb = encoded[src.text] = encode(src.text)
        return e.first_block, PromptConditioning.make(src.text, emb)

    return PromptSchedule.of(conditioning(e) for e in schedule)
