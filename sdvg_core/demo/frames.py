"""Video-like synthetic frames for checks that need natural image statistics without image files.

Used by the ImageReward preprocessing checks (scripts/reward_tensor_deviation.py, tests/test_reward_tensor_path.py):
white noise would hide how resampling treats smooth regions, edges and fine texture, which real frames all have.
"""
from __future__ import annotations

import math

import torch


def natural_frames(n: int, h: int, w: int, seed: int = 0, channels: int = 3) -> torch.Tensor:
    """Frames [n, h, w, channels] in 0..1: smooth gradients and a moving blob, fine texture, sensor noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, h).view(h, 1, 1)
    x = torch.linspace(0, 1, w).view(1, w, 1)
    out = []
    for i in range(n):
        phase = torch.rand(3, generator=g) * 2 * math.pi
        base = 0.5 + 0.3 * torch.sin(2 * math.pi * (1.5 * x + 0.7 * y + i / n) + phase.view(1, 1, 3))
        blob = 0.25 * torch.exp(-((x - 0.3 - 0.4 * i / n) ** 2 + (y - 0.5) ** 2) / 0.02)
        texture = 0.05 * torch.sin(2 * math.pi * 37 * x) * torch.sin(2 * math.pi * 23 * y)
        noise = 0.03 * torch.randn(h, w, 3, generator=g)
        out.append((base + blob + texture + noise).clamp(0, 1)[..., :channels])
    return torch.stack(out)
