"""Reference paths of the Wan DiT that only tests use, over the production CausalWan.

- RoPE as Wan computes it (complex128 rotations, `rope_params`): `rope_freqs` / `apply_rope`, and `exact_rope(run)`,
  a copy of a CausalWan whose RoPE tables stay in float64 (the same rotation as complex128 to float64 rounding).
- The training-time full-sequence forward (`block_causal_forward`): every frame attends to the frames of its own
  and earlier blocks (an attention mask), no cache. The fixtures' `fullseq_*` tensors were made by it.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from sdvg_core.models.wan import CausalWan, TextKV
from sdvg_core.models.wan_config import WanDiTConfig
from sdvg_core.models.wan_numerics import RopeTables, rope_angles, rope_rows


def rope_freqs(cfg: WanDiTConfig, positions: tuple[int, ...], h: int, w: int) -> torch.Tensor:
    """Wan's complex128 rotations [F*h*w, D/2] of a frame-major token grid whose frames sit at time `positions`."""
    rows = rope_rows(max(max(positions) + 1, h, w), cfg.rope_max_positions)
    ft, fh, fw = (torch.polar(torch.ones_like(a), a) for a in rope_angles(cfg, "cpu", rows))
    frames = len(positions)
    grid = torch.cat([ft[list(positions)][:, None, None, :].expand(frames, h, w, -1),
                      fh[None, :h, None, :].expand(frames, h, w, -1),
                      fw[None, None, :w, :].expand(frames, h, w, -1)], dim=-1)
    return grid.reshape(frames * h * w, -1)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Wan's rotation: adjacent channel pairs of x [B, S, N, D] times freqs [S, D/2] (complex128); x's dtype."""
    b, s, n, d = x.shape
    xc = torch.view_as_complex(x.to(torch.float64).reshape(b, s, n, d // 2, 2))  # [B, S, N, D/2]
    return torch.view_as_real(xc * freqs[None, :, None, :]).reshape(b, s, n, d).to(x.dtype)


class Float64RopeTables(RopeTables):
    """RoPE cos/sin kept in float64: the rotation of Wan's complex128 path."""

    dtype = torch.float64


def exact_rope(run: CausalWan) -> CausalWan:
    """A copy of `run` (same network) rotating with float64 RoPE tables, as the reference does."""
    ref = copy.copy(run)
    ref.rope = Float64RopeTables(run.cfg, run.device)
    return ref


def block_causal_forward(run: CausalWan, x: torch.Tensor, t: torch.Tensor, text: TextKV, block_frames: int,
                         frame_offset: int = 0) -> torch.Tensor:
    """Velocity [B, F, C, H, W] of the full sequence x [B, F, C, H, W], each frame attending to its own and earlier
    blocks of `block_frames` latent frames (self-attention masked; cross-attention to the text is not)."""
    _, ph, pw = run.cfg.patch_size
    tpf = (x.shape[3] // ph) * (x.shape[4] // pw)
    unmasked = run.attention_fn

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if any(k is tk for tk in text.k):  # cross-attention to the prompt
            return unmasked(q, k, v)
        block_of = torch.arange(q.shape[2], device=q.device) // (tpf * block_frames)
        mask = block_of[None, :] <= block_of[:, None]  # [S, S] a query sees its own and earlier blocks
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).flatten(2)

    ref = copy.copy(run)
    ref.attention_fn = attend
    return ref.forward(x, t, text, frame_offset=frame_offset).flow
