"""A TAEHV with seeded random weights (any widths; taew2_1's by default), for benchmarks, tests and tiny demos.

Nothing here decodes a real video: the weights only keep activations O(1) through the network (so timings and
memory are those of real data: no dead ReLUs, no denormals) and the RGB output around mid-grey.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..models.taehv import TAEHV, MemBlock, TAEHVConfig, run_layers

RELU_GAIN = math.sqrt(2.0)  # He initialisation: a conv followed by ReLU keeps the activation's scale
RESIDUAL_GAIN = 0.5  # a MemBlock's last conv, added to its input: keeps the sum's scale near the input's
OUTPUT_STD, OUTPUT_MEAN = 0.15, 0.5  # decoder.22: RGB around mid-grey, mostly inside the [0, 1] clamp
CALIBRATION_LATENT = (1, 2, 16, 8, 8)  # [B, T, C, h, w] N(0, 1) latent on which decoder.22 is scaled to OUTPUT_STD
# The tiny TAEHV of the tests and the tiny demo's routing decoder: the widths of the shared taehv_tiny fixture
# (its meta.json `widths`), the taew2_1 layout at a size a CPU decodes in milliseconds.
TINY_WIDTHS = {"encoder": 12, "decoder_n_f": (32, 24, 16, 8)}
TINY_NAME = "tiny-taehv"


def tiny_taehv(seed: int = 0, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> TAEHV:
    """A seeded random TAEHV at the tiny widths (named `tiny-taehv`; DiT-space latents, as taew2_1)."""
    return random_taehv(TAEHVConfig.from_widths(TINY_WIDTHS, name=TINY_NAME), seed, dtype, device)


def random_taehv(config: TAEHVConfig | str = "taew2_1", seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> TAEHV:
    """A TAEHV of `config` with seeded random weights; `key` names the seed, the widths and the dtype."""
    model = TAEHV(config)
    gen = torch.Generator().manual_seed(seed)
    last_of_memblock = {id(m.conv[4]) for m in model.modules() if isinstance(m, MemBlock)}
    output_conv = model.decoder[-1]
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, nn.Conv2d):
                continue
            fan_in = module.weight[0].numel()
            if module is output_conv:
                std = 1.0 / math.sqrt(fan_in)  # rescaled below
            elif id(module) in last_of_memblock:
                std = RESIDUAL_GAIN / math.sqrt(fan_in)
            else:
                std = RELU_GAIN / math.sqrt(fan_in)
            module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * std)
            if module.bias is not None:
                module.bias.zero_()
        _calibrate_output(model, gen)
    c = model.config
    model.key = (f"random-taehv:{c.name}:e{c.encoder_width}:d{'-'.join(map(str, c.decoder_widths))}:seed{seed}:"
                 f"{str(dtype).replace('torch.', '')}")
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _calibrate_output(model: TAEHV, gen: torch.Generator) -> None:
    """Scale decoder.22 so the RGB before the clamp has std OUTPUT_STD and mean OUTPUT_MEAN on a random latent."""
    output_conv = model.decoder[-1]
    latent = torch.randn(CALIBRATION_LATENT, generator=gen)  # [B, T, C, h, w]
    features, _ = run_layers(model.decoder[:-1], latent.flatten(0, 1), CALIBRATION_LATENT[0],
                             (None,) * model.decoder_slots)  # [B * 4T, w3, 8h, 8w]
    output_conv.bias.zero_()
    rgb = output_conv(features)  # [B * 4T, 3, 8h, 8w]
    output_conv.weight.mul_(OUTPUT_STD / rgb.std().clamp_min(1e-12))
    output_conv.bias.fill_(OUTPUT_MEAN)
