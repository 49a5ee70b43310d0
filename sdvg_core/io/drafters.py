"""Which drafter a file is: Self-Forcing, Causal Forcing (chunk-wise) or LongLive, with each one's .pt entry, LoRA
and default context recipe, and the one loader the demo CLI, sdvg_eval and the ComfyUI drafter node call.

A checkpoint does not say how it was trained: Self-Forcing, Causal Forcing (chunk-wise and frame-wise) and LongLive
files hold the same Wan 2.1 1.3B parameter names and shapes and no config (their trainers save only
`{"generator": ..., "generator_ema": ...}`; the frame size of a block is a run-time attribute, not a weight). So the
kind is stated by the user; a frame-wise Causal Forcing file is refused by that statement or, as a safety net, by
its published path (`framewise/`, `framewise-2step.pt`), and a renamed frame-wise file cannot be recognised.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..models.state_dict import CheckpointError
from ..models.wan import WanDiT
from ..models.wan_config import WanDiTConfig
from .checkpoint import LoadReport, load_wan_dit
from .lora import LoraSpec

__all__ = ["DrafterKind", "DRAFTER_KINDS", "DEFAULT_DRAFTER_KIND", "FRAMEWISE_KIND", "DrafterError",
           "drafter_kind", "drafter_problems", "lora_spec", "load_drafter", "drafter_own_recipe"]

# The kinds below are chunk-wise: blocks of 3 latent frames (Self-Forcing's num_frame_per_block, shared by the target).
CHUNK_FRAMES = 3


class DrafterError(CheckpointError):
    """The drafter file, its kind or its LoRA cannot be used together; the message says why and what to do."""


@dataclass(frozen=True)
class DrafterKind:
    """A published block-causal Wan 2.1 1.3B drafter: where it comes from and how its files are read."""

    name: str  # what the user states: --drafter-kind, the node's kind option
    title: str
    source: str  # where the files are published
    files: str  # the published file name(s)
    default_entry: str  # .pt entry its own inference code reads
    default_recipe: str  # context recipe name (engine/recipes) that reproduces its own inference
    lora_rank: int | None = None  # its LoRA's rank when it has one (alpha below, targets: every Linear in the blocks)
    lora_alpha: float | None = None
    lora_required: bool = False  # the published model is base + LoRA: loading the base alone is refused


DRAFTER_KINDS: dict[str, DrafterKind] = {
    # Self-Forcing README: inference with --use_ema (generator_ema). Context: growing cache, 3-frame blocks.
    "self_forcing": DrafterKind(
        "self_forcing", "Self-Forcing DMD (Wan 2.1 T2V 1.3B, chunk-wise, 4 steps)",
        "https://huggingface.co/gdhe17/Self-Forcing", "checkpoints/self_forcing_dmd.pt",
        default_entry="generator_ema", default_recipe="self_forcing"),
    # thu-ml/Causal-Forcing README: the chunk-wise command has no --use_ema, so inference.py reads `generator`;
    # configs/causal_forcing_dmd_chunkwise.yaml equals Self-Forcing's in every inference field (LONG_VIDEO.md).
    "causal_forcing": DrafterKind(
        "causal_forcing", "Causal Forcing chunk-wise (Wan 2.1 T2V 1.3B, 4 steps; a drop-in for Self-Forcing)",
        "https://huggingface.co/zhuhz22/Causal-Forcing", "chunkwise/causal_forcing.pt",
        default_entry="generator", default_recipe="self_forcing"),
    # NVlabs/LongLive v1.0 configs/longlive_inference.yaml: generator_ckpt longlive_base.pt (use_ema false ->
    # `generator`), lora_ckpt lora.pt, adapter rank 256 / alpha 256; local_attn_size 12, sink_size 3.
    "longlive": DrafterKind(
        "longlive", "LongLive-1.3B (Wan 2.1 T2V 1.3B base + LoRA; frame sink + sliding window)",
        "https://huggingface.co/Efficient-Large-Model/LongLive-1.3B", "models/longlive_base.pt + models/lora.pt",
        default_entry="generator", default_recipe="longlive", lora_rank=256, lora_alpha=256.0, lora_required=True),
}
DEFAULT_DRAFTER_KIND = "self_forcing"  # the published SDVG pairing
# Stated by users who have a frame-wise file, so that it is refused with the reason instead of run wrongly.
FRAMEWISE_KIND = "causal_forcing_framewise"
_FRAMEWISE_REASON = (
    "Causal Forcing's frame-wise models (framewise/causal_forcing.pt, causal-forcing++/framewise-2step.pt and "
    "framewise-1step.pt) denoise 1 latent frame per block (num_frame_per_block 1, and a 4-step schedule only for "
    f"the first block of the 2- and 1-step models); SDVG's own loop (the demo, SDVG Generate) drafts "
    f"{CHUNK_FRAMES}-frame blocks, which such a file would run with the wrong causal structure. Use the chunk-wise "
    "model chunkwise/causal_forcing.pt (kind causal_forcing) instead; or, in ComfyUI's own AR workflow, load the "
    "frame-wise file with Load Diffusion Model into SDVG Sampler (AR video)'s 'drafter' (or as the guider's MODEL) "
    "with num_frame_per_block 1.")
# Published frame-wise paths spell it framewise / frame-wise / frame_wise (folder or file name).
_FRAMEWISE_NAME = re.compile(r"frame[-_ ]?wise", re.IGNORECASE)


def drafter_kind(name: str | None) -> DrafterKind:
    """The kind by name (None: the default); DrafterError for the frame-wise kind or an unknown name."""
    name = name or DEFAULT_DRAFTER_KIND
    if name == FRAMEWISE_KIND:
        raise DrafterError(f"drafter kind {FRAMEWISE_KIND} is not supported: {_FRAMEWISE_REASON}")
    if name not in DRAFTER_KINDS:
        raise DrafterError(f"unknown drafter kind {name!r}; known: {', '.join(DRAFTER_KINDS)}")
    return DRAFTER_KINDS[name]


def drafter_problems(path: str | os.PathLike | None, kind: str | None = None,
                     lora: str | os.PathLike | None = None) -> list[str]:
    """Why this drafter file / kind / LoRA combination cannot run, found without reading any file."""
    try:
        k = drafter_kind(kind)
    except DrafterError as e:
        return [str(e)]
    problems = []
    if path is not None:
        parts = Path(path).expanduser().parts[-2:]  # the published layout: <folder>/<file>
        if any(_FRAMEWISE_NAME.search(part) for part in parts):
            problems.append(f"{path}: the path names a frame-wise model. {_FRAMEWISE_REASON} (SDVG cannot tell a "
                            f"frame-wise file from a chunk-wise one by its contents: the weights have the same names "
                            f"and shapes, so a renamed frame-wise file is not recognised.)")
    if k.lora_required and lora is None:
        problems.append(f"drafter kind {k.name} is {k.title}: its base checkpoint needs its LoRA ({k.files}, from "
                        f"{k.source}); give the LoRA file as well")
    if path is None and lora is not None:
        problems.append("a drafter LoRA was given without a drafter checkpoint to merge it into")
    return problems


def lora_spec(kind: DrafterKind, lora: str | os.PathLike, alpha: float | None = None) -> LoraSpec:
    """How a LoRA for this kind must look: its rank and every Linear in the blocks when the kind has one."""
    if kind.lora_rank is None:  # a user's own LoRA: any single rank and targets, alpha = rank unless given
        return LoraSpec(str(lora), alpha=alpha)
    return LoraSpec(str(lora), alpha=kind.lora_alpha if alpha is None else alpha, rank=kind.lora_rank,
                    every_block_linear=True)


def load_drafter(path: str | os.PathLike, kind: str | None = None, lora: str | os.PathLike | None = None, *,
                 pt_entry: str | None = None, lora_alpha: float | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu",
                 config: WanDiTConfig | str | None = None) -> tuple[WanDiT, WanDiTConfig, LoadReport]:
    """Load a drafter checkpoint of the stated kind, with its LoRA merged; returns (WanDiT, WanDiTConfig, LoadReport).

    `pt_entry` None: the kind's entry (Self-Forcing generator_ema, Causal Forcing / LongLive generator). Every
    problem of `drafter_problems` is raised first, as a DrafterError, before any file is read.
    """
    problems = drafter_problems(path, kind, lora)
    if problems:
        raise DrafterError("; ".join(problems), path)
    k = drafter_kind(kind)
    entry = pt_entry or k.default_entry
    spec = lora_spec(k, lora, lora_alpha) if lora is not None else None
    try:
        net, cfg, report = load_wan_dit(path, config, dtype=dtype, device=device, pt_entry=entry, lora=spec)
    except CheckpointError as e:
        if f"has no '{entry}' entry" in str(e) and pt_entry is None:
            raise DrafterError(f"{e}. {k.name} files are read from '{entry}' by default ({k.title}); if this file is "
                               f"of another kind, say which (self_forcing: generator_ema; causal_forcing and longlive: "
                               f"generator), or pick the entry explicitly. Causal Forcing's frame-wise files, which "
                               f"its README runs with --use_ema, cannot be used at all.", path) from e
        raise
    return net, cfg, _with_kind(report, k)


def _with_kind(report: LoadReport, kind: DrafterKind) -> LoadReport:
    return replace(report, notes=(f"kind {kind.name}", *report.notes))


def drafter_own_recipe(kind: str | None) -> str | None:
    """The context recipe a drafter kind runs when its recipe is left on auto: a kind trained for its own long-video
    recipe (LongLive) runs it; the Self-Forcing family (None here) runs the run's recipe, the published pairing."""
    k = DRAFTER_KINDS.get(kind or DEFAULT_DRAFTER_KIND)
    own = k.default_recipe if k is not None else None
    return own if own != "self_forcing" else None
