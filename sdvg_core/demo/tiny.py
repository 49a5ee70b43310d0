"""The embedded default: tiny random models of the exact architectures (drafter, target, VAE, ImageReward).

Used by the demo (so it runs on a fresh machine without any download), by the tests and by the
benchmark. Nothing here is meant to make good videos; it exercises every code path of the real system.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.wan_config import PRESETS, WanDiTConfig
from ..io.reward_files import random_scorer
from ..models.reward import ImageRewardScorer
from .vocab import synthetic_tiny_config, write_synthetic_vocab
from ..models.vae import VAE_PRESETS, WanVAE
from ..models.wan import CausalWan, build_random

DEMO_PROMPT = "a corgi puppy runs through a sunny meadow, slow motion, cinematic"


@dataclass
class TinyModels:
    drafter: CausalWan
    target: CausalWan
    vae: WanVAE
    scorer: ImageRewardScorer


def random_vae(seed: int = 0, preset: str = "tiny", dtype: torch.dtype = torch.float32) -> WanVAE:
    """A Wan 2.1 VAE of the given preset with seeded random weights (RMS gains ~1, convs ~N(0, 1/fan_in))."""
    vae = WanVAE(VAE_PRESETS[preset])
    vae.key = f"random-vae:{preset}:seed{seed}:{str(dtype).replace('torch.', '')}"  # the engine's memo identity
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
    return vae.to(dtype).eval().requires_grad_(False)


def tiny_scorer(seed: int = 0, workdir: str | Path | None = None) -> ImageRewardScorer:
    """A tiny random ImageReward with a synthetic vocabulary written to `workdir` (a temp dir by default)."""
    folder = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="sdvg-vocab-"))
    vocab = write_synthetic_vocab(folder / "vocab.txt")
    return random_scorer(synthetic_tiny_config(vocab), vocab, seed=seed)


def tiny_models(seed: int = 0, drafter: str | WanDiTConfig = "tiny-drafter", target: str | WanDiTConfig = "tiny-target",
                workdir: str | Path | None = None, compile: bool | str = False) -> TinyModels:
    """Seeded random drafter/target/VAE/scorer; the two DiTs share text width and latent channels. `compile`:
    CausalWan's (True: inductor, a string: another torch.compile backend)."""
    dcfg = PRESETS[drafter] if isinstance(drafter, str) else drafter
    tcfg = PRESETS[target] if isinstance(target, str) else target
    d = CausalWan(build_random(dcfg, seed=seed + 1), dcfg, compile=compile)
    t = CausalWan(build_random(tcfg, seed=seed + 2), tcfg, compile=compile)
    d.key, t.key = f"tiny-drafter-{seed}", f"tiny-target-{seed}"
    vae, scorer = random_vae(seed + 3), tiny_scorer(seed + 4, workdir)
    vae.key, scorer.key = f"tiny-vae-{seed + 3}", f"tiny-imagereward-{seed + 4}"
    return TinyModels(d, t, vae, scorer)
