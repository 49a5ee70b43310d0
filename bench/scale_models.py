"""The benchmark's model sizes and how to build them: real random-weight models, or shape-only models on `meta`
(the four models of a run, and a tiny routing decoder, TAEHV at taew2_1's widths, for the `route` configurations).

- `build_models`: random weights at the real shapes (full-size DiTs are made on the device directly, meta init);
- `build_meta`: the same four models on the meta device (no memory, no weights): the GPU check's dry run runs
  their forwards there to check shapes and count FLOPs at full size on any CPU.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.demo.tiny import random_vae  # noqa: E402
from sdvg_core.demo.tiny_taehv import TINY_NAME, TINY_WIDTHS, random_taehv  # noqa: E402
from sdvg_core.demo.vocab import write_synthetic_vocab  # noqa: E402
from sdvg_core.io.reward_files import count_vocab_lines, random_scorer, read_vocab_bytes  # noqa: E402
from sdvg_core.models.reward import _reset_position_ids, empty_model  # noqa: E402
from sdvg_core.models.reward_config import (  # noqa: E402
    BERT_BASE_VOCAB_TOKENS, EXTRA_SPECIAL_TOKENS, IMAGEREWARD_V1, TINY as TINY_REWARD,
)
from sdvg_core.models.taehv import TAEHV, TAEHV_PRESETS, TAEHVConfig  # noqa: E402
from sdvg_core.models.vae import VAE_PRESETS, WanVAE  # noqa: E402
from sdvg_core.models.wan import CausalWan, WanDiT, build_random, build_random_on  # noqa: E402
from sdvg_core.models.wan_config import PRESETS, WanDiTConfig  # noqa: E402


@dataclass(frozen=True)
class Scale:
    """One benchmark size: the four model shapes and the frame size."""

    drafter: WanDiTConfig
    target: WanDiTConfig
    vae: str  # VAE preset
    reward: Any  # ImageRewardConfig (vocab size set from the synthetic vocabulary)
    width: int
    height: int
    exact_init: bool  # True: build_random on the CPU (tiny, bit-stable); False: meta init on the device
    route_vae: TAEHVConfig = TAEHV_PRESETS["taew2_1"]  # the tiny routing decoder (taew2_1's widths)


# mid: one layer each keeps the 14B:1.3B per-layer FLOP ratio (~7.2 at these widths, vs 7.4 per forward at full
# size). Its shares of DiT / decode / scoring are NOT those of full size (one DiT layer against the real VAE): the
# benchmark projects them to full size from the measured unit costs and the FLOPs of each unit (bench/units.py).
SCALES: dict[str, Scale] = {
    "tiny": Scale(PRESETS["tiny-drafter"], PRESETS["tiny-target"], "tiny", TINY_REWARD, 48, 32, True,
                  TAEHVConfig.from_widths(TINY_WIDTHS, name=TINY_NAME)),
    "mid": Scale(replace(PRESETS["wan2.1-t2v-1.3b"], name="1.3b-widths-1-layer", num_layers=1),
                 replace(PRESETS["wan2.1-t2v-14b"], name="14b-widths-1-layer", num_layers=1),
                 "wan2.1-vae", replace(IMAGEREWARD_V1, name="imagereward-widths-2-layers", vision_layers=2,
                                       text_layers=2), 128, 64, False),
    "full": Scale(PRESETS["wan2.1-t2v-1.3b"], PRESETS["wan2.1-t2v-14b"], "wan2.1-vae", IMAGEREWARD_V1, 832, 480,
                  False),
}


@dataclass
class Models:
    drafter: CausalWan
    target: CausalWan
    vae: Any
    scorer: Any  # ImageRewardScorer (real) or ImageRewardModel (meta)
    route_vae: Any = None  # TAEHV: the tiny routing decoder of the `route` configurations


def run_dtypes(device: torch.device) -> tuple[torch.dtype, torch.dtype, torch.dtype]:
    """(DiT, VAE, ImageReward) dtypes: bf16 / bf16 / fp16 on CUDA (the loaders' defaults), fp32 on the CPU."""
    if device.type == "cpu":
        return torch.float32, torch.float32, torch.float32
    return torch.bfloat16, torch.bfloat16, torch.float16


def build_models(scale: Scale, device: torch.device, compile: bool, workdir: Path) -> Models:
    """Random weights at the real shapes; full-size DiTs are made on the device directly (meta init)."""
    dit_dtype, vae_dtype, reward_dtype = run_dtypes(device)
    nets = []
    for i, cfg in enumerate((scale.drafter, scale.target)):
        net = build_random(cfg, seed=1 + i).to(device, dit_dtype) if scale.exact_init else \
            build_random_on(cfg, device, dit_dtype, seed=1 + i)
        nets.append(CausalWan(net, cfg, dtype=dit_dtype, device=device, key=f"bench-{cfg.name}-{dit_dtype}",
                              compile=compile))
    vae = random_vae(3, scale.vae, dtype=vae_dtype).to(device)
    vocab = write_synthetic_vocab(workdir / "vocab.txt")
    reward_cfg = scale.reward.with_vocab(count_vocab_lines(read_vocab_bytes(vocab)) + len(EXTRA_SPECIAL_TOKENS))
    scorer = random_scorer(reward_cfg, vocab, seed=4, device=device, dtype=reward_dtype)
    route_vae = random_taehv(scale.route_vae, seed=5, dtype=vae_dtype, device=device)
    return Models(nets[0], nets[1], vae, scorer, route_vae)


def build_meta(scale: Scale, device_type: str = "cuda") -> Models:
    """The four models on the meta device, in the dtypes a `device_type` run uses: shapes and FLOPs, no memory.

    The scorer is the bare ImageRewardModel (its tokenizer needs a vocabulary file; the vocabulary size is BERT's).
    """
    dit_dtype, vae_dtype, reward_dtype = run_dtypes(torch.device(device_type))
    meta = torch.device("meta")
    nets = []
    for cfg in (scale.drafter, scale.target):
        with meta:
            net = WanDiT(cfg).to(dit_dtype)
        nets.append(CausalWan(net, cfg, dtype=dit_dtype, device=meta, key=f"meta-{cfg.name}"))
    with meta:
        vae = WanVAE(VAE_PRESETS[scale.vae]).to(vae_dtype)
        route_vae = TAEHV(scale.route_vae).to(vae_dtype)
    route_vae.key = f"meta-{scale.route_vae.name}"
    reward_cfg = scale.reward.with_vocab(BERT_BASE_VOCAB_TOKENS + len(EXTRA_SPECIAL_TOKENS))
    reward = empty_model(reward_cfg)
    _reset_position_ids(reward, meta)
    reward.blip.to(reward_dtype)
    return Models(nets[0], nets[1], vae, reward.eval(), route_vae.eval())


def weight_bytes(models: Models) -> dict[str, int]:
    """Bytes of every model's parameters and buffers (real or meta), per model."""
    def size(module) -> int:
        return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])

    scorer = getattr(models.scorer, "model", models.scorer)
    out = {"drafter": size(models.drafter.net), "target": size(models.target.net), "vae": size(models.vae),
           "scorer": size(scorer)}
    if models.route_vae is not None:
        out["route_vae"] = size(models.route_vae)
    return out
