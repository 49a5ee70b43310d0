"""Numerics shared by every Wan DiT path: timestep sinusoids, 3D RoPE and attention.

RoPE pairs adjacent channels, split (t, h, w) = 22/21/21 pairs at head_dim 128, angles in float64 (Wan's
`rope_params`); the forward applies them in float32 with cos/sin tables built once per table size (`RopeTables`).
Wan itself rotates in complex128: the difference is ~1e-7 relative, far below the fixtures' 1e-4 (tests/ hold the
complex128 reference).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import inspect
import itertools
import sys
import types
import weakref

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


def rope_rows(needed: int, minimum: int) -> int:
    """Rows to build a RoPE table with so position `needed - 1` is in it: Wan's size, else the next power of two
    (the table grows by doubling, so a long video rebuilds it a logarithmic number of times)."""
    return max(minimum, 1 << max(needed - 1, 0).bit_length())


@dataclass(frozen=True)
class RopeCosSin:
    """Real rotation tables of one forward call, cos/sin [S, D/2] (float32), shared by every layer."""

    cos: torch.Tensor
    sin: torch.Tensor


def apply_rope_real(x: torch.Tensor, rope: RopeCosSin) -> torch.Tensor:
    """Rotate adjacent channel pairs of x [B, S, N, D] with real cos/sin tables (in their precision, at least
    float32); returns x's dtype."""
    x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # [B, S, N, D/2] each
    c, s = rope.cos[None, :, None], rope.sin[None, :, None]  # [1, S, 1, D/2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(3).to(x.dtype)  # [B, S, N, D]


class RopeTables:
    """A model's RoPE cos/sin tables per axis on its device, in `dtype` (angles in float64, then rounded), built for
    more rows (doubling) when a position needs it; `at` makes a call's [S, D/2] grid."""

    dtype = torch.float32

    def __init__(self, cfg: WanDiTConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self._axes: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None  # (cos, sin) per axis
        self._index: dict[tuple[int, ...], torch.Tensor] = {}  # device gathers of non-consecutive positions
        self._static: dict[tuple, RopeCosSin] = {}  # (name, frames, h, w) -> buffers `into` refills in place

    @property
    def rows(self) -> int:
        """Positions the tables hold now (Wan's 1024 at first)."""
        return 0 if self._axes is None else self._axes[0][0].shape[0]

    def _tables(self, rows: int) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        if self._axes is None or self.rows < rows:
            angles = rope_angles(self.cfg, "cpu", rope_rows(rows, self.cfg.rope_max_positions))
            self._axes = tuple((a.cos().to(self.dtype).to(self.device), a.sin().to(self.dtype).to(self.device))
                               for a in angles)
        return self._axes

    def _rows(self, table: torch.Tensor, positions: tuple[int, ...]) -> torch.Tensor:
        """Rows `positions` of a per-axis table: a slice when they are consecutive, a gather otherwise (the device
        index made once per distinct tuple: no per-call copy)."""
        first = positions[0]
        if positions == tuple(range(first, first + len(positions))):
            return table[first:first + len(positions)]
        hit = self._index.get(positions)
        if hit is None:
            if len(self._index) >= SINUSOID_CACHE_ENTRIES:
                self._index.clear()
            hit = self._index[positions] = torch.tensor(positions, dtype=torch.long).to(self.device)
        return table.index_select(0, hit)

    def _grid(self, ft: torch.Tensor, fh: torch.Tensor, fw: torch.Tensor, positions: tuple[int, ...], h: int,
              w: int) -> torch.Tensor:
        """Per-axis tables [rows, pairs_axis] -> [F*h*w, D/2] for a frame-major grid at time `positions`."""
        frames = len(positions)
        grid = torch.cat([
            self._rows(ft, positions)[:, None, None, :].expand(frames, h, w, -1),
            fh[None, :h, None, :].expand(frames, h, w, -1),
            fw[None, None, :w, :].expand(frames, h, w, -1),
        ], dim=-1)
        return grid.reshape(frames * h * w, -1)

    def at(self, positions: tuple[int, ...], h: int, w: int) -> RopeCosSin:
        """cos/sin [F*h*w, D/2] of a frame-major token grid whose frames sit at time `positions`."""
        (ct, st), (ch, sh), (cw, sw) = self._tables(max(max(positions) + 1, h, w))
        return RopeCosSin(self._grid(ct, ch, cw, positions, h, w), self._grid(st, sh, sw, positions, h, w))

    def into(self, name: str, positions: tuple[int, ...], h: int, w: int) -> RopeCosSin:
        """`at(positions, h, w)` written in place into the buffers kept for `name` and this grid shape (made once):
        a call's tables keep one storage from call to call (static inputs of a compiled block or a CUDA graph),
        filled by device copies from the per-axis tables, one per run of consecutive positions."""
        (ct, st), (ch, sh), (cw, sw) = self._tables(max(max(positions) + 1, h, w))
        frames, key = len(positions), (name, len(positions), h, w)
        out = self._static.get(key)
        if out is None or out.cos.dtype != ct.dtype:
            pairs = ct.shape[1] + ch.shape[1] + cw.shape[1]
            out = self._static[key] = RopeCosSin(*(torch.empty(frames * h * w, pairs, dtype=ct.dtype, device=ct.device)
                                                    for _ in range(2)))
        nt, nh = ct.shape[1], ch.shape[1]
        for dst, (ft, fh, fw) in ((out.cos, (ct, ch, cw)), (out.sin, (st, sh, sw))):
            grid = dst.view(frames, h, w, -1)  # [F, h, w, D/2]
            grid[..., nt:nt + nh].copy_(fh[None, :h, None, :])  # broadcast over frames and columns
            grid[..., nt + nh:].copy_(fw[None, None, :w, :])
            j = 0
            while j < frames:  # a run of consecutive positions: one copy
                n = 1
                while j + n < frames and positions[j + n] == positions[j] + n:
                    n += 1
                grid[j:j + n, ..., :nt].copy_(ft[positions[j]:positions[j] + n, None, None, :])
                j += n
        return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention, q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D]; 1/sqrt(D) scale, no dropout; `mask`:
    None, or an additive [1, 1, 1, Sk] (0 for a key to attend, -inf for an empty cache slot)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, N, Sq, D]
    return out.transpose(1, 2).flatten(2)


# An attention kernel: q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D], 1/sqrt(D) scale. The default is
# `attention` (PyTorch SDPA); a host may inject its own (ComfyUI's optimized_attention: sage/flash/xformers). A call
# whose cache span has empty slots passes `mask=` (additive, [1, 1, 1, Sk]) to a kernel that takes a `mask` keyword
# (`takes_mask`); a kernel that does not is never given a masked call (CausalWan uses `attention` for those).
AttentionFn = Callable[..., torch.Tensor]
Interrupt = Callable[[], None]
# Distinct timestep tensors whose device sinusoids are kept (a recipe uses ~5 steps x a few shapes; bounded so
# per-frame schedules cannot grow it without limit).
SINUSOID_CACHE_ENTRIES = 64


def takes_mask(fn: Callable) -> bool:
    """Whether an attention kernel accepts the `mask` keyword (ComfyUI's optimized_attention does: every backend
    either applies it or falls back to PyTorch SDPA with it)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "mask" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


# Host attention kernels a compiled block calls as one opaque op, by slot number (the graph holds the number, the
# kernel is looked up when the op runs; weak: a kernel nobody holds any more is dropped). The op and this registry
# are process-wide: ComfyUI loads the pack under its own package name beside any other copy of sdvg_core, and a
# torch.library op is one per process, so every copy registers into, and the op reads from, the same table.
_REGISTRY = "_sdvg_host_attention_kernels"


def _kernels() -> types.ModuleType:
    table = sys.modules.get(_REGISTRY)
    if table is None:
        table = types.ModuleType(_REGISTRY, "SDVG: host attention kernels by slot (models/wan_numerics.py)")
        table.kernels, table.slots = weakref.WeakValueDictionary(), itertools.count()
        sys.modules[_REGISTRY] = table
    return table


def register_attention(fn: Callable) -> int:
    """The slot `host_attention_op` finds `fn` under (the same slot for the same function object)."""
    table = _kernels()
    for slot, known in list(table.kernels.items()):
        if known is fn:
            return slot
    slot = next(table.slots)
    table.kernels[slot] = fn
    return slot


def _host_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    slot: int) -> torch.Tensor:
    """A host's attention kernel (registered at `slot`) on q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D]: one
    op to torch.compile (the kernel itself, e.g. ComfyUI's sage or flash path, is never traced)."""
    fn = _kernels().kernels[slot]
    out = fn(q, k, v) if mask is None else fn(q, k, v, mask=mask)
    return out.clone() if any(out is t for t in (q, k, v)) else out


def _host_attention_shape(q, k, v, mask, slot):
    b, n, s, d = q.shape
    return q.new_empty(b, s, n * d)


if not hasattr(torch.ops.sdvg, "host_attention"):  # defined once per process, whichever copy comes first
    torch.library.custom_op("sdvg::host_attention", _host_attention, mutates_args=()).register_fake(
        _host_attention_shape)
host_attention_op = torch.ops.sdvg.host_attention
