"""The SDVG model set from local files: target, drafter, VAE and ImageReward, each with a stable memo key.

One place for what the demo CLI and the evaluation harness both do; ComfyUI builds its models through its own
loaders (nodes/) instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .checkpoint import load_wan_dit, load_wan_vae
from .drafters import DrafterError, drafter_problems, load_drafter, drafter_kind as kind_by_name

from ..models.dtypes import DTYPES  # noqa: F401 (the --dtype choices of the command lines)


def vae_dtype_for(device: str | torch.device) -> torch.dtype:
    """The VAE runs in fp32 on the CPU (no fast fp16 there) and in fp16 on GPUs, as ComfyUI's VAE does."""
    return torch.float32 if torch.device(device).type == "cpu" else torch.float16


@dataclass(frozen=True)
class ModelSet:
    drafter: Any  # CausalWan | None
    target: Any  # CausalWan
    vae: Any  # WanVAE
    scorer: Any  # ImageRewardScorer | None
    notes: tuple[str, ...]  # one line per loaded DiT (file, preset, entry, dtype)
    drafter_kind: str | None = None  # io.drafters kind of the loaded drafter (None: no drafter)
    drafter_recipe: str | None = None  # that kind's default context recipe name (engine/recipes)


def load_model_files(*, target: str, vae: str, drafter: str | None = None, reward: str | None = None,
                     vocab: str | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu",
                     pt_entry: str | None = None, drafter_kind: str | None = None, drafter_lora: str | None = None,
                     drafter_lora_alpha: float | None = None, compile: bool | str = False) -> ModelSet:
    """Load the given files (drafter / reward optional); keys come from the loaders (file identity + dtype).

    The drafter is read as `drafter_kind` (io.drafters: self_forcing by default) from `pt_entry` (None: the kind's
    entry) with `drafter_lora` merged; a drafter/kind/LoRA problem is raised before any file is read. `compile`: both
    DiTs' CausalWan(compile=...) (True: inductor, a string: another torch.compile backend).
    """
    from ..models.wan import CausalWan
    from .reward_files import load_scorer

    kind = None
    if drafter or drafter_lora:
        problems = drafter_problems(drafter, drafter_kind, drafter_lora)
        if problems:
            raise DrafterError("; ".join(problems), drafter)
        kind = kind_by_name(drafter_kind)
    tnet, tcfg, trep = load_wan_dit(target, dtype=dtype, device=device)
    notes = [f"target: {trep.describe()}"]
    target_model = CausalWan(tnet, tcfg, key=trep.key, compile=compile)
    drafter_model = None
    if drafter:
        dnet, dcfg, drep = load_drafter(drafter, drafter_kind, drafter_lora, pt_entry=pt_entry,
                                        lora_alpha=drafter_lora_alpha, dtype=dtype, device=device)
        notes.append(f"drafter: {drep.describe()}")
        drafter_model = CausalWan(dnet, dcfg, key=drep.key, compile=compile)
    vae_model = load_wan_vae(vae, dtype=vae_dtype_for(device), device=device)  # sets vae.key from the file
    scorer = load_scorer(reward, vocab, device=device) if reward else None
    return ModelSet(drafter_model, target_model, vae_model, scorer, tuple(notes),
                    drafter_kind=kind.name if drafter_model is not None else None,
                    drafter_recipe=kind.default_recipe if drafter_model is not None else None)
