"""Numerics shared by every Wan DiT path: timestep sinusoids, 3D RoPE (exact complex128 and fast float32) and attention.

RoPE pairs adjacent channels, split (t, h, w) = 22/21/21 pairs at head_dim 128, angles in float64 (Wan's
`rope_params`); the generation path applies them in float32 with cos/sin tables built once per call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .wan_config import WanDiTConfig


def sinusoidal_embedding(freq_dim: int, t: torch.Tensor) -> torch.Tensor:
    """[N] timesteps -> [N, freq_dim] as [cos | sin] with frequencies 10000^(-k/half), in float64."""
    half = freq_dim // 2
    freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float64, device=t.device) / half)
    angles = torch.outer(t.to(torch.float64), freqs)  # [N, half]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)


def rope_angles(cfg: WanDiTConfig, device: torch.device | str = "cpu",
                rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-axis rotation angles [rows, pairs] in float64 (Wan's `rope_params`, before polar): row p is position p.

    `rows` defaults to Wan's table size (cfg.rope_max_positions); any larger value computes the same angles for
    positions past it (position x frequency in float64), so RoPE has no length limit.
    """
    n = cfg.rope_max_positions if rows is None else rows
    tables = []
    for pairs in cfg.rope_pairs:
        inv = 1.0 / torch.pow(cfg.rope_theta, torch.arange(pairs, dtype=torch.float64, device=device) * 2 / (2 * pairs))
        tables.append(torch.outer(torch.arange(n, dtype=torch.float64, device=device), inv))
    return tables[0], tables[1], tables[2]


def rope_table(cfg: WanDiTConfig, device: torch.device | str = "cpu",
               rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-axis complex rotations [rows, pairs] (complex128), Wan's `rope_params` (the exact path)."""
    return tuple(torch.polar(torch.ones_like(a), a) for a in rope_angles(cfg, device, rows))  # type: ignore[return-value]


def rope_rows(needed: int, minimum: int) -> int:
    """Rows to build a RoPE table with so position `needed - 1` is in it: Wan's size, else the next power of two
    (the table grows by doubling, so a long video rebuilds it a logarithmic number of times)."""
    return max(minimum, 1 << max(needed - 1, 0).bit_length())


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Exact path: rotate adjacent channel pairs of x [B, S, N, D] by freqs [S, D/2] (complex128); x's dtype."""
    b, s, n, d = x.shape
    xc = torch.view_as_complex(x.to(torch.float64).reshape(b, s, n, d // 2, 2))  # [B, S, N, D/2]
    return torch.view_as_real(xc * freqs[None, :, None, :]).reshape(b, s, n, d).to(x.dtype)


@dataclass(frozen=True)
class RopeCosSin:
    """Real rotation tables of one forward call, cos/sin [S, D/2] float32, shared by every layer."""

    cos: torch.Tensor
    sin: torch.Tensor


def apply_rope_real(x: torch.Tensor, rope: RopeCosSin) -> torch.Tensor:
    """Rotate adjacent channel pairs of x [B, S, N, D] in float32 with real cos/sin tables; returns x's dtype."""
    x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # [B, S, N, D/2] each
    c, s = rope.cos[None, :, None], rope.sin[None, :, None]  # [1, S, 1, D/2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(3).to(x.dtype)  # [B, S, N, D]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention, q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D]; 1/sqrt(D) scale, no dropout."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, N, Sq, D]
    return out.transpose(1, 2).flatten(2)


# An attention kernel: q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D], unmasked, 1/sqrt(D) scale. The default
# is `attention` (PyTorch SDPA); a host may inject its own (ComfyUI's optimized_attention: sage/flash/xformers).
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Interrupt = Callable[[], None]
# Distinct timestep tensors whose device sinusoids are kept (a recipe uses ~5 steps x a few shapes; bounded so
# per-frame schedules cannot grow it without limit).
SINUSOID_CACHE_ENTRIES = 64
