"""Wan 2.1 text-to-video DiT: the modules (Wan parameter names) and a block-causal forward with a KV cache.

The forward (`CausalWan`) only *calls* submodules (`block.self_attn.q(x)`, `block.norm3(x)`, ...) and never
reads weight tensors, except the two `modulation` parameters that Wan itself adds to the time embedding.
So the same forward drives this file's `WanDiT` and ComfyUI's loaded `WanModel` (fp8, GGUF or LoRA-patched
layers keep working because their own `forward` runs).

Conventions follow Wan 2.1 / Self-Forcing / Krea (docs/design.md §2): tokens are
frame-major then row then column; RoPE pairs adjacent channels, split (t, h, w) = 22/21/21 pairs at
head_dim 128 (angles in float64, applied in float32: wan_numerics.py); the KV cache views live in kv_cache.py;
per-frame timestep modulation; no text padding mask.
"""
from __future__ import annotations

import logging
import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache, KVInputs, KVWrite, OpenKVWrite, StaleKVError, TextKV  # noqa: F401  (re-exported)
from .wan_config import WanDiTConfig
# the shared numerics (also importable from here, as tests and hosts do)
from .wan_numerics import (  # noqa: F401
    SINUSOID_CACHE_ENTRIES, AttentionFn, Interrupt, RopeCosSin, RopeTables, apply_rope_real, attention, rope_angles,
    register_attention, rope_rows, sinusoidal_embedding, takes_mask,
)

# ---------------------------------------------------------------------------------------------------------
# Modules (parameter names identical to the official checkpoints and to ComfyUI's comfy/ldm/wan/model.py)
# ---------------------------------------------------------------------------------------------------------


class WanRMSNorm(nn.Module):
    """RMSNorm over the full width with a learned gain, computed in float32 (Wan's q/k norm)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight.to(x.dtype)


class WanLayerNorm(nn.LayerNorm):
    """LayerNorm evaluated in float32 whatever the weight dtype (Wan's norm1/norm2/norm3/head norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.float() if self.weight is not None else None
        b = self.bias.float() if self.bias is not None else None
        return F.layer_norm(x.float(), self.normalized_shape, w, b, self.eps).type_as(x)


class WanAttention(nn.Module):
    """q, k, v, o projections and q/k RMSNorm; used for both self- and cross-attention."""

    def __init__(self, dim: int, eps: float, qk_norm: bool):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q = WanRMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = WanRMSNorm(dim, eps) if qk_norm else nn.Identity()


class WanBlock(nn.Module):
    """One DiT block: modulated self-attention, cross-attention to text, modulated FFN."""

    def __init__(self, cfg: WanDiTConfig):
        super().__init__()
        d = cfg.dim
        self.norm1 = WanLayerNorm(d, eps=cfg.eps, elementwise_affine=False)
        self.self_attn = WanAttention(d, cfg.eps, cfg.qk_norm)
        self.norm3 = WanLayerNorm(d, eps=cfg.eps, elementwise_affine=True) if cfg.cross_attn_norm else nn.Identity()
        self.cross_attn = WanAttention(d, cfg.eps, cfg.qk_norm)
        self.norm2 = WanLayerNorm(d, eps=cfg.eps, elementwise_affine=False)
        self.ffn = nn.Sequential(nn.Linear(d, cfg.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(cfg.ffn_dim, d))
        self.modulation = nn.Parameter(torch.randn(1, 6, d) / d**0.5)  # shift/scale/gate x (attn, ffn)


class WanHead(nn.Module):
    """Final modulated LayerNorm + Linear to patch_volume * out_dim values per token."""

    def __init__(self, cfg: WanDiTConfig):
        super().__init__()
        self.norm = WanLayerNorm(cfg.dim, eps=cfg.eps, elementwise_affine=False)
        self.head = nn.Linear(cfg.dim, cfg.out_dim * cfg.patch_volume)
        self.modulation = nn.Parameter(torch.randn(1, 2, cfg.dim) / cfg.dim**0.5)  # shift, scale


class WanDiT(nn.Module):
    """Wan 2.1 T2V DiT with the official parameter names; run it through `CausalWan`."""

    def __init__(self, cfg: WanDiTConfig):
        super().__init__()
        self.config = cfg
        d = cfg.dim
        self.patch_embedding = nn.Conv3d(cfg.in_dim, d, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.text_embedding = nn.Sequential(nn.Linear(cfg.text_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d))
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.blocks = nn.ModuleList(WanBlock(cfg) for _ in range(cfg.num_layers))
        self.head = WanHead(cfg)



# ---------------------------------------------------------------------------------------------------------
# The forward
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ForwardOutput:
    flow: torch.Tensor | None  # [B, F, C, H, W] velocity prediction (None when only the cache was wanted)
    kv: KVCache | None  # the cache view after the call (a commit extends it; otherwise unchanged)


Hook = Callable[[str, torch.Tensor], None]


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, tpf: int) -> torch.Tensor:
    """x [B, S, dim] * (1 + scale) + shift with per-frame [B, F, dim] modulation."""
    b, s, d = x.shape
    xf = x.view(b, s // tpf, tpf, d)
    return (xf * (1 + scale[:, :, None]) + shift[:, :, None]).view(b, s, d)


def _gate(y: torch.Tensor, gate: torch.Tensor, tpf: int) -> torch.Tensor:
    """y [B, S, dim] (any dtype) * per-frame gate [B, F, dim], in float32."""
    b, s, d = y.shape
    return (y.float().view(b, s // tpf, tpf, d) * gate[:, :, None]).view(b, s, d)


def block_qkv(block: nn.Module, x_res: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, rope: RopeCosSin,
              tpf: int, heads: int, dtype: torch.dtype, rotate_k: bool = True
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Self-attention inputs of one block: x_res [B, S, dim] fp32 -> q (RoPE'd), k (RoPE'd unless rotate_k is False:
    a slot-RoPE cache rotates its keys at attention time), v, each [B, N, S, D] in dtype."""
    b, s, _ = x_res.shape
    sa = block.self_attn
    h = _modulate(block.norm1(x_res), shift, scale, tpf).to(dtype)  # [B, S, dim]
    q = sa.norm_q(sa.q(h)).view(b, s, heads, -1)  # [B, S, N, D]
    k = sa.norm_k(sa.k(h)).view(b, s, heads, -1)
    v = sa.v(h).view(b, s, heads, -1)
    k = apply_rope_real(k, rope) if rotate_k else k
    return apply_rope_real(q, rope).transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


@dataclass(frozen=True)
class BlockCall:
    """What every layer of one model call shares (made once per call, before the layers): the call's shape, its
    RoPE tables (static buffers refilled per call), the cache's device inputs (`KVInputs`: write index, span,
    mask; None without a cache), the slot-RoPE key tables, and the attention kernel for its (un)masked calls."""

    tpf: int
    heads: int
    dtype: torch.dtype
    rope: RopeCosSin  # [S, D/2] each
    kv: KVInputs | None
    key_rope: RopeCosSin | None  # [span, D/2] each: a slot-RoPE cache's keys rotated by logical slot
    attend: Callable


def wan_block(block: nn.Module, x_res: torch.Tensor, e0: torch.Tensor, modulation: torch.Tensor, call: BlockCall,
              k_buf: torch.Tensor | None, v_buf: torch.Tensor | None, text_k: torch.Tensor, text_v: torch.Tensor,
              keys_only: bool = False, hook: Hook | None = None, layer: int = 0) -> torch.Tensor:
    """One transformer layer on the residual stream x_res [B, S, dim] (float32): modulated q/k/v + RoPE, the keys/
    values written into the cache buffers k_buf/v_buf [B, N, capacity, D] at the call's write index, self-attention
    over the cache's fixed span (empty slots masked), cross-attention to the text K/V [B, N, L, D], modulated FFN.
    `keys_only`: stop after the cache write (a commit's last layer). Every shape is fixed per call shape and the
    cache's positions are data, so `torch.compile(fullgraph=True)` of this one function serves every layer and
    every block (CausalWan(compile=...)); `hook` (eager only) sees the intermediate outputs."""
    kv, tpf, n, dt = call.kv, call.tpf, call.heads, call.dtype
    sh1, sc1, g1, sh2, sc2, g2 = (e0 + modulation[:, None]).unbind(2)  # [B, F, dim] each
    q, k, v = block_qkv(block, x_res, sh1, sc1, call.rope, tpf, n, dt, call.key_rope is None)  # [B, N, S, D] each
    if kv is not None:
        k_buf[:, :, kv.index] = k[:, :, kv.skip:]  # in place: the call's written frames
        v_buf[:, :, kv.index] = v[:, :, kv.skip:]
    if keys_only:  # (reads neither the span nor the mask: one graph per write shape)
        return x_res
    mask = None
    if kv is not None:
        k, v, mask = k_buf[:, :, :kv.span], v_buf[:, :, :kv.span], kv.mask
        if call.key_rope is not None:  # cached keys are un-rotated: rotate every slot by its logical index
            k = apply_rope_real(k.transpose(1, 2), call.key_rope).transpose(1, 2)
    y = call.attend(q, k, v, mask)  # [B, S, N*D]
    if hook is not None:
        hook(f"block{layer}_self_attn_out", block.self_attn.o(y))
    x_res = x_res + _gate(block.self_attn.o(y), g1, tpf)
    ca = block.cross_attn
    hc = x_res.to(dt) if isinstance(block.norm3, nn.Identity) else block.norm3(x_res).to(dt)
    qc = ca.norm_q(ca.q(hc)).view(x_res.shape[0], x_res.shape[1], n, -1).transpose(1, 2)  # [B, N, S, D]
    yc = call.attend(qc, text_k, text_v, None)  # [B, S, N*D]
    if hook is not None:
        hook(f"block{layer}_cross_attn_out", block.cross_attn.o(yc))
    x_res = x_res + ca.o(yc).float()
    h = _modulate(block.norm2(x_res), sh2, sc2, tpf).to(dt)
    x_res = x_res + _gate(block.ffn(h), g2, tpf)
    if hook is not None:
        hook(f"block{layer}_out", x_res)
    return x_res


# Shape variants a compiled block keeps (torch's own default is 8 per function, and fullgraph=True fails past it):
# one per call shape (query tokens, attended span, masked or not, written tokens, keys only). A windowed cache
# makes a handful; a whole-video cache adds one span per doubling of the video (kv_cache.attention_span), ~2 per
# doubling with the commit's keys-only variant: 64 covers a 2^16-block video.
COMPILE_VARIANTS = 64


def _warn_variants() -> None:
    """Once per process: a compiled block met more call shapes than it keeps (COMPILE_VARIANTS over every model and
    size of the process); those calls run eagerly, with the same result."""
    if not _WARNED:
        _WARNED.append(True)
        logging.getLogger("SDVG").warning(
            "SDVG: the compiled transformer block reached %d shape variants in this process; further new call "
            "shapes run uncompiled (same results, slower)", COMPILE_VARIANTS)


_WARNED: list[bool] = []


class _Attend:
    """The attention of a call: the dit's kernel for unmasked calls and for masked ones when it takes a mask,
    PyTorch SDPA (`attention`) for masked calls otherwise. A kernel other than `attention` runs as one opaque op
    (`host_attention_op`) inside a compiled block, so whatever it does (sage, flash, xformers) is not traced."""

    def __init__(self, fn: AttentionFn, opaque: bool):
        self.fn, self.masked_ok = fn, takes_mask(fn)
        self.slot = register_attention(fn) if opaque and fn is not attention else None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if self.fn is attention or (mask is not None and not self.masked_ok):
            return attention(q, k, v, mask)
        if self.slot is not None:
            return torch.ops.sdvg.host_attention(q, k, v, mask, self.slot)
        return self.fn(q, k, v) if mask is None else self.fn(q, k, v, mask=mask)


class CausalWan:
    """Block-causal inference over a Wan DiT network (ours or ComfyUI's), with explicit compute dtype.

    The residual stream and the timestep modulation are kept in float32 (as the official Wan code does);
    every submodule gets its input in `dtype`. Hot-path options:
    - attention_fn: the attention kernel (default PyTorch SDPA; ComfyUI hosts pass `optimized_attention`); a call
      whose cache span has empty slots gives it `mask=` if it takes one, else runs on SDPA (`_Attend`).
    - compile: `torch.compile(fullgraph=True)` of the whole transformer layer (`wan_block`: q/k/v, RoPE, the KV
      write, self-attention over the cache, cross-attention, FFN; True = inductor, a string names another backend).
      The cache's positions are device data, so one compiled function serves every layer and every block: one
      graph per call shape (kv_cache.attention_span), counted by torch._dynamo.utils.counters (tests/test_hotpath).
    RoPE tables (`rope`, float32 cos/sin built once per table size) are shared by every call and layer; a call's
    grids are written into static buffers (`RopeTables.into`).
    """

    def __init__(self, net: nn.Module, cfg: WanDiTConfig, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None, key: str | None = None, *,
                 attention_fn: AttentionFn | None = None, compile: bool | str = False):
        self.net = net
        self.key = key  # identity for derived-data caches (weights file + dtype); None = this object
        self.cfg = cfg
        first = next(net.parameters())
        self.device = torch.device(device) if device is not None else first.device
        self.dtype = dtype or (first.dtype if first.dtype.is_floating_point and first.element_size() >= 2 else torch.float32)
        self.attention_fn: AttentionFn = attention_fn or attention
        self.compile = compile
        self.rope = RopeTables(cfg, self.device)
        self._mods: dict[int, tuple[tuple, torch.Tensor, torch.Tensor]] = {}  # id(param) -> (stamp, fp32 copy, param)
        self._sin_cache: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}  # id(t) -> (t, version, sinusoids)
        self._block: Callable = wan_block
        if compile:  # True: inductor; a string names another torch.compile backend (tests use "eager")
            backend = "inductor" if compile is True else str(compile)
            self._block = torch.compile(wan_block, fullgraph=True, dynamic=False, backend=backend)
        self._attends: dict[int, tuple[AttentionFn, _Attend]] = {}  # id(attention_fn) -> its adapter
        self.calls = 0  # forward calls made (counted work)
        # the distinct layer call shapes made (query tokens, attended span, masked, written tokens, query-only tokens,
        # slot RoPE, keys only: a cache-only call's last layer): a compiled block makes at most one graph per entry
        self.call_shapes: set[tuple] = set()

    # -- per-prompt ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_text(self, context: torch.Tensor, hook: Hook | None = None,
                    interrupt: Interrupt | None = None) -> TextKV:
        """umT5 embeddings [B, L, text_dim] -> per-layer cross-attention K/V. No padding mask (as Wan).

        `interrupt()` (may raise to cancel) is called before every layer's projections.
        """
        cfg, net = self.cfg, self.net
        if context.shape[-1] != cfg.text_dim:
            raise ValueError(f"prompt embeddings have width {context.shape[-1]}, this model expects {cfg.text_dim} "
                             f"(umT5-XXL gives 4096)")
        if interrupt is not None:
            interrupt()
        ctx = net.text_embedding(context.to(self.device, self.dtype))  # [B, L, dim]
        if hook:
            hook("text_embedding_out", ctx)
        b, n, d = ctx.shape[0], cfg.num_heads, cfg.head_dim
        ks, vs = [], []
        for block in net.blocks:
            if interrupt is not None:
                interrupt()
            ca = block.cross_attn
            ks.append(ca.norm_k(ca.k(ctx)).view(b, -1, n, d).transpose(1, 2).contiguous())  # [B, N, L, D]
            vs.append(ca.v(ctx).view(b, -1, n, d).transpose(1, 2).contiguous())
        return TextKV(tuple(ks), tuple(vs))

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _check_positions(frames: int, frame_offset: int) -> None:
        """RoPE positions are computed for any frame index (no table limit); only negative ones are refused."""
        if frame_offset < 0:
            raise ValueError(f"RoPE frame positions {frame_offset}..{frame_offset + frames - 1} are negative")

    def _sinusoid(self, t: torch.Tensor) -> torch.Tensor:
        """Timestep sinusoids [B*F, freq_dim] in the compute dtype on the device: float64 where t lives (a CPU
        timestep: on the CPU, Wan's precision whatever the device), made once per timestep tensor (keyed by the
        tensor itself: the recipes pass `schedule.timestep_tensor`'s, one per value), so later calls neither copy
        host data to the device nor read the timestep's value."""
        version = 0 if t.is_inference() else t._version
        hit = self._sin_cache.get(id(t))
        if hit is not None and hit[0] is t and hit[1] == version:
            return hit[2]
        if len(self._sin_cache) >= SINUSOID_CACHE_ENTRIES:
            self._sin_cache.clear()
        emb = sinusoidal_embedding(self.cfg.freq_dim, t.flatten()).to(self.device, self.dtype)
        self._sin_cache[id(t)] = (t, version, emb)  # holding t keeps its id from being reused while cached
        return emb

    def _embed_time(self, t: torch.Tensor, hook: Hook | None) -> tuple[torch.Tensor, torch.Tensor]:
        """t [B, F] -> e [B, F, dim] (head) and e0 [B, F, 6, dim] (blocks), both float32."""
        b, f = t.shape
        sin = self._sinusoid(t)  # [B*F, freq_dim] in the compute dtype, on the device
        e = self.net.time_embedding(sin)  # [B*F, dim]
        e0 = self.net.time_projection(e)  # [B*F, 6*dim]
        if hook:
            hook("time_embedding_out", e)
            hook("time_projection_out", e0)
        return e.float().view(b, f, -1), e0.float().view(b, f, 6, -1)

    def _patchify(self, x: torch.Tensor, hook: Hook | None) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """x [B, F, C, H, W] -> tokens [B, F*h*w, dim] (float32) and the token grid (F, h, w)."""
        if x.shape[2] != self.cfg.in_dim:
            raise ValueError(f"latents have {x.shape[2]} channels, the model expects {self.cfg.in_dim}")
        xc = x.permute(0, 2, 1, 3, 4).to(self.device, self.dtype)  # [B, C, F, H, W]
        p = self.net.patch_embedding(xc)  # [B, dim, F', h, w]
        if hook:
            hook("patch_embedding_out", p)
        grid = tuple(p.shape[2:])
        tokens = p.flatten(2).transpose(1, 2).float()  # [B, S, dim]
        return tokens.reshape(-1).view(tokens.shape), grid  # row-major strides, as every layer's output (one graph)

    def _unpatchify(self, y: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """Head output [B, S, pt*ph*pw*C] (c fastest) -> [B, F, C, H, W]."""
        f, h, w = grid
        pt, ph, pw = self.cfg.patch_size
        c = self.cfg.out_dim
        y = y.view(y.shape[0], f, h, w, pt, ph, pw, c)
        y = torch.einsum("bfhwtpqc->bftchpwq", y)
        return y.reshape(y.shape[0], f * pt, c, h * ph, w * pw)

    def _param(self, p: torch.Tensor) -> torch.Tensor:
        """A float32 copy of a small parameter (modulation) on the compute device, cast once and reused.

        Re-cast only when the parameter changes (a new tensor, an in-place update such as a LoRA patch, or a
        move): keyed on its storage pointer, version counter, device and dtype.
        """
        # inference tensors (ComfyUI runs nodes under torch.inference_mode) have no version counter
        version = 0 if p.is_inference() else p._version
        stamp = (p.data_ptr(), version, p.device, p.dtype)
        hit = self._mods.get(id(p))
        if hit is not None and hit[0] == stamp and hit[2] is p:
            return hit[1]
        cast = p.detach().to(self.device, torch.float32)  # aliases p when it already is fp32 on the device
        self._mods[id(p)] = (stamp, cast, p)  # holding p keeps its id from being reused while cached
        return cast

    def _open(self, kv: KVCache | KVWrite | None, frames: int, tpf: int, frame_offset: int) -> OpenKVWrite | None:
        """Start the call's write into the cache (`KVCache.append` for a view, else the given plan)."""
        if kv is None:
            return None
        plan = kv if isinstance(kv, KVWrite) else kv.append(frames, frame_offset)
        if plan.frames != frames or plan.tokens_per_frame != tpf:
            raise ValueError(f"a KV write of {plan.frames} frames x {plan.tokens_per_frame} tokens cannot take a "
                             f"call of {frames} frames x {tpf} tokens")
        return plan.open()

    def _head(self, x_res: torch.Tensor, e: torch.Tensor, grid: tuple[int, int, int], hook: Hook | None) -> torch.Tensor:
        """The modulated head on the residual stream [B, S, dim] -> velocity [B, F, C, H, W] (float32)."""
        net, tpf = self.net, grid[1] * grid[2]
        hm = self._param(net.head.modulation)[:, None] + e[:, :, None]  # [B, F, 2, dim]
        hshift, hscale = hm.unbind(2)
        out = net.head.head(_modulate(net.head.norm(x_res), hshift, hscale, tpf).to(self.dtype))
        if hook:
            hook("head_out", out.view(out.shape[0], grid[0], tpf, -1))
        return self._unpatchify(out.float(), grid)

    # -- main entry -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, x: torch.Tensor, t: torch.Tensor, text: TextKV, *, frame_offset: int = 0,
                kv: KVCache | KVWrite | None = None, commit: bool = False, want_output: bool = True,
                hook: Hook | None = None, interrupt: Interrupt | None = None) -> ForwardOutput:
        """One model call on latent frames x [B, F, C, H, W] at per-frame timesteps t [B, F].

        - kv=None: the frames attend to each other only.
        - kv a view: the frames are appended to it (`KVCache.append`: the oldest window frames evicted when the
          window is full) and attend to sink + window + themselves (read over the cache's fixed span, its empty
          slots masked: kv_cache.py); kv a `KVWrite` plan: that write (e.g. `rewrite`, a recache). With
          commit=True the returned view includes the written frames (a KV rebuild or Self-Forcing's clean commit);
          otherwise they are scratch and the returned view is the input's.
        RoPE time positions are frame_offset .. frame_offset + F - 1 (absolute or window-relative: the caller's
        recipe decides), or, for a `slot` RoPE cache, the logical slot indices of queries and cached keys.
        `interrupt()` is called before every transformer layer; when it raises, nothing is committed (the slots
        the call wrote are stamped as overwritten, so no view reads their partial keys).
        """
        self.calls += 1
        tokens, grid = self._patchify(x, hook)  # [B, S, dim]
        (f, h, w), b = grid, tokens.shape[0]
        if t.shape != (b, f):
            raise ValueError(f"timestep must be [B, F] = {(b, f)}, got {tuple(t.shape)}")
        self._check_positions(f, frame_offset)
        e, e0 = self._embed_time(t, hook)
        write = self._open(kv, f, h * w, frame_offset)
        call = self._call(write, f, h, w, frame_offset)
        x_res = tokens
        blocks = self.net.blocks
        kvi = call.kv
        written = (0, 0, False) if kvi is None else (kvi.index.shape[0], kvi.skip, call.key_rope is not None)
        read = (None, False) if kvi is None else (kvi.span, kvi.mask is not None)
        if want_output or len(blocks) > 1:
            self.call_shapes.add((tokens.shape[1],) + read + written + (False,))
        if not want_output:  # the last layer only writes: its graph reads no span
            self.call_shapes.add((tokens.shape[1], None, False) + written + (True,))
        layer = self._block if hook is None else wan_block
        with torch._dynamo.config.patch(recompile_limit=COMPILE_VARIANTS) if self.compile else nullcontext():
            for i, block in enumerate(blocks):
                if interrupt is not None:
                    interrupt()
                k_buf, v_buf = (None, None) if write is None else (write.buffer.k[i], write.buffer.v[i])
                # only the cache wanted: the last block's keys/values are written, its outputs feed nothing
                args = (block, x_res, e0, self._param(block.modulation), call, k_buf, v_buf, text.k[i], text.v[i],
                        not want_output and i == len(blocks) - 1)
                try:
                    x_res = layer(*args, hook=hook, layer=i)
                except torch._dynamo.exc.FailOnRecompileLimitHit:  # raised before the layer ran: nothing written
                    _warn_variants()
                    x_res = wan_block(*args, hook=hook, layer=i)
        new_kv = None if write is None else write.commit() if commit else kv.base if isinstance(kv, KVWrite) else kv
        return ForwardOutput(self._head(x_res, e, grid, hook) if want_output else None, new_kv)

    def _call(self, write: OpenKVWrite | None, f: int, h: int, w: int, frame_offset: int) -> BlockCall:
        """What every layer of the call shares: RoPE grids (static buffers), the cache's device inputs, the kernel.
        A slot-RoPE cache positions the queries by their logical slots and rotates each key slot by its own."""
        slot = write is not None and write.rope == "slot"
        positions = write.query_positions if slot else tuple(range(frame_offset, frame_offset + f))
        rope = self.rope.into("query", positions, h, w)
        key_rope = self.rope.into("keys", write.slot_positions, h, w) if slot else None
        return BlockCall(h * w, self.cfg.num_heads, self.dtype, rope, None if write is None else write.inputs(),
                         key_rope, self._attend())

    def _attend(self) -> _Attend:
        """The adapter of the current `attention_fn` (made once per kernel; a host may swap the kernel)."""
        fn = self.attention_fn
        hit = self._attends.get(id(fn))
        if hit is None or hit[0] is not fn:
            hit = self._attends[id(fn)] = (fn, _Attend(fn, opaque=bool(self.compile)))
        return hit[1]



def build_random(cfg: WanDiTConfig, seed: int = 0, dtype: torch.dtype = torch.float32) -> WanDiT:
    """A WanDiT with seeded random weights everywhere (non-zero heads and biases), for tests and the demo."""
    gen = torch.Generator().manual_seed(seed)
    net = WanDiT(cfg)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm_q.weight") or name.endswith("norm_k.weight") or name.endswith("norm3.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif name.endswith("modulation"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(cfg.dim))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
    return net.to(dtype).eval()


@torch.no_grad()
def build_random_on(cfg: WanDiTConfig, device: torch.device | str, dtype: torch.dtype, seed: int = 0) -> WanDiT:
    """A WanDiT with seeded random weights made directly on `device` in `dtype` (meta init, then to_empty).

    For full-size benchmarks: the 14B never passes through CPU RAM in float32. Same distributions as
    `build_random` (not the same numbers: the generator lives on `device`).
    """
    with torch.device("meta"):
        net = WanDiT(cfg)
    net = net.to(dtype).to_empty(device=device)  # cast on meta (free), then allocate once in dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in net.named_parameters():
        if name.endswith("norm_q.weight") or name.endswith("norm_k.weight") or name.endswith("norm3.weight"):
            p.normal_(1.0, 0.1, generator=gen)
        elif p.ndim == 1:
            p.normal_(0.0, 0.05, generator=gen)
        elif name.endswith("modulation"):
            p.normal_(0.0, 1 / math.sqrt(cfg.dim), generator=gen)
        else:
            p.normal_(0.0, 1 / math.sqrt(p[0].numel()), generator=gen)
    return net.eval().requires_grad_(False)
