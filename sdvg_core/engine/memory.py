"""Device memory a generation needs, computed from the spec, the models and the recipe, before any work.

Used two ways: the host reserves `dit_step_bytes` beside a DiT's weights when it loads it (so ComfyUI frees room
for the recipe's real window, e.g. Self-Forcing's whole-video window), and `check_fits` refuses, up front, a size
whose estimate exceeds the device (naming the estimate and the limit) instead of running out of memory or
running for hours. The figures are upper-bound estimates of live tensors, not measurements; the benchmark
(bench/bench_scale.py) measures `torch.cuda.max_memory_allocated` for comparison.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..models.vae import WanVAEConfig
from ..models.wan_config import WanDiTConfig
from .decoded import held_pixel_blocks

GIB = 2**30
FP32 = 4  # bytes: CausalWan keeps the residual stream, modulation and RoPE in float32 (Wan's own choice)
# Live [S, dim] float32 tensors at the peak of one DiT layer (models/wan.py CausalWan.forward): the residual
# stream, its norm, the modulated copy, and RoPE's x.float() + rotated result for q and for k (4).
DIT_FP32_ROWS = 7
# Live [S, dim] tensors in the compute dtype: modulated input, q, k, v, attention output, cross-attention query.
DIT_DTYPE_ROWS = 6
# Live [S, ffn_dim] tensors in the compute dtype inside the FFN: the first linear's output and GELU's output.
FFN_ROWS = 2
# Live full-size tensors at the peak of one VAE residual block (models/vae_layers.py ResidualBlock): input,
# norm output, activation output, the conv's history-padded input and its output.
VAE_LIVE_ROWS = 5
# Causal convs per decoder residual block (two 3x3x3 convs; the 1x1 shortcut keeps no history).
VAE_CONVS_PER_RES_BLOCK = 2
# Frames a causal 3x3x3 conv remembers (models/vae_layers.py CausalStep: the last <= 2 input frames).
VAE_HISTORY_FRAMES = 2


class MemoryRefused(ValueError):
    """A generation whose estimated memory exceeds what the device has; the message names both."""


@dataclass(frozen=True)
class DiTMemory:
    """One DiT's needs beside its weights: its KV window, text K/V and one layer's activations at the peak.

    `kv_held`: the cache stays on the device between blocks, while the other models run: every recipe now (one
    KV buffer per run and model, reused by every block, Krea's per-block rebuild included: ContextServices.run_kv);
    False only for an estimate of a cache made and dropped within a model's own calls.
    """

    name: str
    weights: int
    kv: int
    text_kv: int
    activations: int
    window_tokens: int
    query_tokens: int
    kv_held: bool = False

    @property
    def step(self) -> int:
        """What a model call needs beside the weights (the ComfyUI `memory_required` of a load)."""
        return self.kv + self.text_kv + self.activations

    @property
    def total(self) -> int:
        return self.weights + self.step

    @property
    def phase(self) -> int:
        """This model's calls beside what the generation holds anyway (its text K/V, a kept cache)."""
        return self.weights + self.activations + (0 if self.kv_held else self.kv)

    @property
    def held(self) -> int:
        return self.text_kv + (self.kv if self.kv_held else 0)


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak device memory of a generation. The models run one at a time, so the peak is the largest phase plus
    what the generation holds through every phase (derived/memo.py `pin`): both models' text K/V, the caches of
    recipes that keep them between blocks, the decoder cache after the newest block and a pending draft's
    decode (its decoder cache and pixels). `host_pixels` is CPU memory: the decoded blocks held for the
    recipes' pixel history and the output writer."""

    dits: tuple[DiTMemory, ...]
    vae_weights: int
    vae_cache: int
    vae_activations: int
    draft_pixels: int = 0  # one block's decoded pixels on the device (a pending draft's decode)
    host_pixels: int = 0

    @property
    def vae_total(self) -> int:
        return self.vae_weights + self.vae_cache + self.vae_activations

    @property
    def held(self) -> int:
        """Device bytes held through every phase (outside the memo's budget)."""
        return sum(d.held for d in self.dits) + 2 * self.vae_cache + self.draft_pixels

    @property
    def peak(self) -> int:
        return max([d.phase for d in self.dits] + [self.vae_total]) + self.held

    def describe(self) -> str:
        """One line per part, in GiB, for errors and logs."""
        parts = [f"{d.name}: weights {d.weights / GIB:.2f} + KV window {d.kv / GIB:.2f} ({d.window_tokens} tokens"
                 f"{', kept between blocks' if d.kv_held else ''}) + text K/V {d.text_kv / GIB:.2f} + activations "
                 f"{d.activations / GIB:.2f} ({d.query_tokens} query tokens) = {d.total / GIB:.2f} GiB" for d in self.dits]
        parts.append(f"VAE decode: weights {self.vae_weights / GIB:.2f} + decoder cache {self.vae_cache / GIB:.2f} + "
                     f"one latent frame's activations {self.vae_activations / GIB:.2f} = {self.vae_total / GIB:.2f} GiB")
        parts.append(f"held through every phase: {self.held / GIB:.2f} GiB (text K/V, kept KV caches, the newest "
                     f"decoder cache and a pending draft's decode); peak {self.peak / GIB:.2f} GiB; host pixels held "
                     f"{self.host_pixels / GIB:.2f} GiB")
        return "; ".join(parts)


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def dit_memory(cfg: WanDiTConfig, dtype: torch.dtype, *, tokens_per_frame: int, window_frames: int,
               frames_per_block: int, context_frames: int = 0, batch: int = 1, name: str | None = None,
               weight_dtype: torch.dtype | None = None, kv_held: bool = False) -> DiTMemory:
    """A DiT's KV window (2 x layers x window tokens x dim), text K/V and peak layer activations.

    Query tokens per call: a block, or a recipe's context rebuild of `context_frames` frames in one call (Krea).
    """
    size = dtype_bytes(dtype)
    window = window_frames * tokens_per_frame
    query = max(frames_per_block, context_frames) * tokens_per_frame
    kv = 2 * cfg.num_layers * batch * window * cfg.dim * size
    text_kv = 2 * cfg.num_layers * batch * cfg.text_len * cfg.dim * size
    act = batch * query * (cfg.dim * (DIT_FP32_ROWS * FP32 + DIT_DTYPE_ROWS * size) + FFN_ROWS * cfg.ffn_dim * size)
    weights = cfg.num_params() * dtype_bytes(weight_dtype or dtype)
    return DiTMemory(name or cfg.name, weights, kv, text_kv, act, window, query, kv_held)


def vae_decode_memory(cfg: WanVAEConfig, dtype: torch.dtype, height: int, width: int,
                      batch: int = 1) -> tuple[int, int]:
    """(decoder cache bytes, peak activation bytes of one latent frame) for pixel size height x width.

    Walks the decoder's stages (models/vae.py Decoder3d): each stage's resolution, channels and frames.
    """
    size = dtype_bytes(dtype)
    h = height // cfg.spatial_compression
    w = width // cfg.spatial_compression
    dims = [cfg.dim * m for m in (cfg.dim_mult[-1], *reversed(cfg.dim_mult))]
    hist = VAE_HISTORY_FRAMES * size  # bytes per channel per pixel of one conv's history
    frames = 1
    # conv1 + middle (two residual blocks) at latent resolution
    cache = (cfg.z_dim + 2 * VAE_CONVS_PER_RES_BLOCK * dims[0]) * hist * h * w
    peak = VAE_LIVE_ROWS * dims[0] * frames * h * w * size
    for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0:
            in_dim //= 2  # the previous stage's upsampler halved the channels
        # first residual block: its first conv sees in_dim channels; every other conv sees out_dim
        convs_out = (cfg.num_res_blocks + 1) * VAE_CONVS_PER_RES_BLOCK - 1
        cache += (in_dim + convs_out * out_dim) * hist * h * w
        peak = max(peak, VAE_LIVE_ROWS * max(in_dim, out_dim) * frames * h * w * size)
        if i != len(cfg.dim_mult) - 1:
            if cfg.temporal_upsample[i]:
                cache += out_dim * hist * h * w  # the temporal upsampler's causal conv
                frames *= 2
            h, w = 2 * h, 2 * w
            peak = max(peak, VAE_LIVE_ROWS * out_dim * frames * h * w * size)  # the upsampled tensor
    cache += dims[-1] * hist * h * w  # the head conv
    return batch * cache, batch * peak


def estimate_generation(*, dits: list[tuple[WanDiTConfig, torch.dtype]], vae: WanVAEConfig, vae_dtype: torch.dtype,
                        height: int, width: int, window_frames: int | Sequence[int], frames_per_block: int = 3,
                        context_frames: int | Sequence[int] = 0, kv_held: bool | Sequence[bool] = False,
                        vae_weight_bytes: int | None = None, batch: int = 1,
                        held_pixel_frames: int = 0) -> MemoryEstimate:
    """The estimate for a size: each DiT at its recipe's window, and the VAE decode at the pixel size.

    `window_frames`, `context_frames` (query frames of the largest call) and `kv_held` are one value for every
    DiT or one per DiT (`estimate_for_spec` takes them from each model's recipe). `held_pixel_frames`: decoded
    frames kept on the CPU for the recipes and the output writer.
    """
    n = len(dits)
    windows, contexts, helds = (_per_dit(v, n) for v in (window_frames, context_frames, kv_held))
    ds = dits[0][0].patch_size
    tpf = (height // vae.spatial_compression // ds[1]) * (width // vae.spatial_compression // ds[2])
    parts = tuple(dit_memory(c, dt, tokens_per_frame=tpf, window_frames=wf, frames_per_block=frames_per_block,
                             context_frames=cf, batch=batch, kv_held=bool(kh))
                  for (c, dt), wf, cf, kh in zip(dits, windows, contexts, helds))
    cache, act = vae_decode_memory(vae, vae_dtype, height, width, batch)
    block_pixels = batch * 3 * height * width * dtype_bytes(vae_dtype)  # one pixel frame
    draft = vae.pixel_frames(frames_per_block, includes_first=False) * block_pixels
    return MemoryEstimate(parts, vae_weight_bytes or 0, cache, act, draft_pixels=draft,
                          host_pixels=held_pixel_frames * block_pixels)


def _per_dit(value, n: int) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"expected one value per DiT ({n}), got {len(value)}")
        return list(value)
    return [value] * n


def check_fits(estimate: MemoryEstimate, limit_bytes: int, where: str = "the device") -> None:
    """Raise MemoryRefused naming the estimate and the limit when the peak does not fit `limit_bytes`."""
    if estimate.peak > limit_bytes:
        raise MemoryRefused(
            f"this generation needs an estimated {estimate.peak / GIB:.1f} GiB at its peak, more than the "
            f"{limit_bytes / GIB:.1f} GiB of {where} ({estimate.describe()}). Use a smaller width/height, "
            f"a recipe with a smaller window (krea), or a lower-precision dtype.")


def estimate_for_spec(spec, recipe, dits: list[tuple[WanDiTConfig, torch.dtype]], vae: WanVAEConfig,
                      vae_dtype: torch.dtype, vae_weight_bytes: int | None = None) -> MemoryEstimate:
    """`estimate_generation` for a GenerationSpec: `recipe` is one recipe for every DiT or one per DiT (in the
    order of `dits`), and each states its own needs (window, largest call, whether it keeps its cache, the pixel
    history it reads back)."""
    recipes = _per_dit(recipe, len(dits))
    F = spec.frames_per_block
    tc = vae.temporal_compression
    history = max(r.pixel_history(tc) for r in recipes)
    held_blocks = held_pixel_blocks(history, tc, F)
    return estimate_generation(dits=dits, vae=vae, vae_dtype=vae_dtype, height=spec.height, width=spec.width,
                               window_frames=[r.window_frames(F, spec.num_latent_frames) for r in recipes],
                               frames_per_block=F, context_frames=[_largest_call(r, spec) for r in recipes],
                               kv_held=True,  # every recipe's buffer lives for the run (context.run_kv)
                               vae_weight_bytes=vae_weight_bytes, held_pixel_frames=held_blocks * tc * F)


def _largest_call(recipe, spec) -> int:
    """Latent frames of a recipe's largest call: its own answer, or at a prompt switch an append cache's recache,
    which runs everything the cache holds in one call (a global Self-Forcing cache: the whole video so far)."""
    F = spec.frames_per_block
    own = recipe.query_frames(F)
    if spec.schedule.switches and not recipe.rebuilds_context_every_block:
        return max(own, recipe.window_frames(F, spec.num_latent_frames))
    return own
