"""The SDVG model set from local files: target, drafter, VAE and ImageReward, each with a stable memo key.

One place for what the demo CLI and the evaluation harness both do; ComfyUI builds its models through its own
loaders (nodes/) instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .checkpoint import DEFAULT_PT_ENTRY, load_wan_dit, load_wan_vae

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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


def load_model_files(*, target: str, vae: str, drafter: str | None = None, reward: str | None = None,
                     vocab: str | None = None, dtype: torch.dtype = torch.float32, device: str = "cpu",
                     pt_entry: str = DEFAULT_PT_ENTRY) -> ModelSet:
    """Load the given files (drafter / reward optional); keys come from the loaders (file identity + dtype)."""
    from ..models.wan import CausalWan
    from .reward_files import load_scorer

    tnet, tcfg, trep = load_wan_dit(target, dtype=dtype, device=device)
    notes = [f"target: {trep.describe()}"]
    target_model = CausalWan(tnet, tcfg, key=trep.key)
    drafter_model = None
    if drafter:
        dnet, dcfg, drep = load_wan_dit(drafter, dtype=dtype, device=device, pt_entry=pt_entry)
        notes.append(f"drafter: {drep.describe()}")
        drafter_model = CausalWan(dnet, dcfg, key=drep.key)
    vae_model = load_wan_vae(vae, dtype=vae_dtype_for(device), device=device)  # sets vae.key from the file
    scorer = load_scorer(reward, vocab, device=device) if reward else None
    return ModelSet(drafter_model, target_model, vae_model, scorer, tuple(notes))
