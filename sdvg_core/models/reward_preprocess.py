"""ImageReward's image preprocessing, exactly: uint8 -> PIL bicubic short side 224 -> centre crop -> CLIP norm.

Two paths give the same uint8 crops: `preprocess_uint8` runs Pillow on the CPU (what the paper measured), and
`preprocess_uint8_tensor` re-implements Pillow's bicubic resampling in integer torch ops on the frames' device
(no copy of the frames to the host). See `pil_bicubic_taps` for why the two agree bit for bit.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
import torch
from PIL import Image

from .reward_config import CLIP_MEAN, CLIP_STD, IMAGE_SIZE

Uint8Mode = Literal["truncate", "round"]
UINT8_MODES: tuple[str, ...] = ("truncate", "round")
Preprocessing = Literal["pil", "tensor"]
PREPROCESSING_MODES: tuple[str, ...] = ("pil", "tensor")
# Pillow's resampling (src/libImaging/Resample.c): bicubic filter a = -0.5 with support 2 input pixels, scaled by
# the reduction factor when shrinking; 8-bit images use fixed-point weights with PRECISION_BITS = 32 - 8 - 2.
_PIL_BICUBIC_A = -0.5
_PIL_BICUBIC_SUPPORT = 2.0
_PIL_PRECISION_BITS = 22
# uint8 full scale: ComfyUI IMAGE tensors hold 0..1, PIL images 0..255.
_U8_MAX = 255.0
# Channel count -> PIL mode of the wrapped frame; ImageReward calls convert("RGB") only after resize and crop.
_PIL_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def frames_to_uint8(frames: torch.Tensor, mode: Uint8Mode = "truncate") -> torch.Tensor:
    """Turn ComfyUI IMAGE frames (float 0..1, or already uint8) into uint8 [F, H, W, C], on the frames' device.

    Why "truncate" is the default: the published SDVG server (yuezhouhu/spec-video-gen, release_server.py,
    `_score_frames_image_reward`) maps each decoded frame with `.float().add(1).mul(0.5).clamp(0, 1)` and hands it
    to torchvision's `to_pil_image`, whose float path is `pic.mul(255).byte()`: multiply by 255 in float32 and cast,
    i.e. truncate toward zero. ComfyUI's SaveImage (`np.clip(255. * i, 0, 255).astype(np.uint8)`) truncates too,
    so a frame saved to PNG and scored from disk gets the same pixels. `mode="round"` rounds to nearest (ties to
    even) instead, the unbiased choice, for anyone who wants it; the two differ by at most 1 grey level per
    channel (truncation darkens by 0.5 level on average). Either way u/255 in float32 maps back to u exactly, so
    uint8 images loaded as floats are unchanged. NaN becomes 0 (the reference's result for NaN is undefined).
    """
    if mode not in UINT8_MODES:
        raise ValueError(f"uint8 conversion mode must be one of {UINT8_MODES}, got {mode!r}")
    if frames.dtype == torch.uint8:
        return frames
    if not frames.is_floating_point():
        raise TypeError(f"frames must be float (0..1) or uint8, got {frames.dtype}")
    x = torch.nan_to_num(frames.float(), nan=0.0).clamp_(0.0, 1.0).mul_(_U8_MAX)  # [F, H, W, C] float32 0..255
    if mode == "round":
        x = x.round_()
    return x.to(torch.uint8)  # float -> uint8 cast truncates toward zero


def resized_hw(height: int, width: int, size: int = IMAGE_SIZE) -> tuple[int, int]:
    """Short side -> size, long side int(size * long / short) (double division, truncated): torchvision Resize(int)."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def crop_offsets(height: int, width: int, size: int = IMAGE_SIZE) -> tuple[int, int]:
    """Centre-crop top/left with Python's round (ties to even), as torchvision's CenterCrop."""
    return int(round((height - size) / 2.0)), int(round((width - size) / 2.0))


def preprocess_uint8(frames_u8: torch.Tensor | np.ndarray, size: int = IMAGE_SIZE) -> torch.Tensor:
    """uint8 [F, H, W, C] (C in 1, 3, 4) -> uint8 [F, 3, size, size] crops, each frame through PIL as ImageReward."""
    arr = frames_u8.detach().cpu().numpy() if isinstance(frames_u8, torch.Tensor) else np.asarray(frames_u8)
    if arr.dtype != np.uint8:
        raise TypeError(f"preprocess_uint8 expects uint8 frames, got {arr.dtype}")
    if arr.ndim != 4 or arr.shape[-1] not in _PIL_MODES:
        raise ValueError(f"frames must be [F, H, W, C] with C in {sorted(_PIL_MODES)}, got shape {tuple(arr.shape)}")
    n, height, width, channels = arr.shape
    if height < 1 or width < 1:
        raise ValueError(f"frames must be at least 1x1 pixels, got {height}x{width}")
    new_h, new_w = resized_hw(height, width, size)
    top, left = crop_offsets(new_h, new_w, size)
    out = np.empty((n, size, size, 3), dtype=np.uint8)  # [F, 224, 224, 3]
    for i in range(n):
        frame = arr[i] if channels != 1 else arr[i, :, :, 0]
        img = Image.fromarray(np.ascontiguousarray(frame))  # uint8 HxW / HxWx3 / HxWx4 -> mode L / RGB / RGBA
        if (new_h, new_w) != (height, width):  # torchvision skips resampling when the size is already right
            img = img.resize((new_w, new_h), Image.Resampling.BICUBIC)
        img = img.crop((left, top, left + size, top + size)).convert("RGB")
        out[i] = np.asarray(img)
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()  # [F, 3, 224, 224] uint8


def normalize_pixels(pixels_u8: torch.Tensor, mean: tuple[float, ...] = CLIP_MEAN,
                     std: tuple[float, ...] = CLIP_STD) -> torch.Tensor:
    """uint8 [F, 3, S, S] -> float32 (x / 255 - mean) / std, bit-identical to ToTensor + Normalize (any device)."""
    m = torch.tensor(mean, dtype=torch.float32, device=pixels_u8.device).view(1, -1, 1, 1)  # [1, 3, 1, 1]
    s = torch.tensor(std, dtype=torch.float32, device=pixels_u8.device).view(1, -1, 1, 1)  # [1, 3, 1, 1]
    return (pixels_u8.float().div(_U8_MAX) - m) / s  # [F, 3, S, S] float32


def _pil_bicubic(x: float) -> float:
    """Pillow's bicubic_filter (a = -0.5), same operation order (double precision)."""
    a = _PIL_BICUBIC_A
    if x < 0.0:
        x = -x
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


@lru_cache(maxsize=64)
def pil_bicubic_taps(in_size: int, out_size: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Pillow's per-output-pixel input start and 8-bit fixed-point weights for a bicubic resize of one axis.

    Mirrors Resample.c `precompute_coeffs` (box = the whole axis) and `normalize_coeffs_8bpc` step by step in
    Python floats (C doubles). The resampling itself is then integer arithmetic (uint8 x int32 weights, + half,
    arithmetic shift, clip to 0..255, horizontal pass first with a uint8 intermediate), which torch reproduces
    exactly on any device; so the tensor path's crops equal Pillow's bit for bit, unless a Pillow build rounds a
    weight differently in the last bit (e.g. compiled with fused multiply-add) - tests/test_reward_tensor_path.py
    compares with the installed Pillow.
    """
    scale = float(in_size) / out_size
    filterscale = max(scale, 1.0)
    support = _PIL_BICUBIC_SUPPORT * filterscale
    ss = 1.0 / filterscale
    starts, weights = [], []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        k = [_pil_bicubic((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in k:
            ww += w
        if ww != 0.0:
            k = [w / ww for w in k]
        one = 1 << _PIL_PRECISION_BITS
        starts.append(xmin)
        weights.append(tuple(int(-0.5 + w * one) if w < 0 else int(0.5 + w * one) for w in k))
    return tuple(starts), tuple(weights)


@lru_cache(maxsize=64)
def _taps_on(device: torch.device, in_size: int, out_size: int, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input indices [hi-lo, taps] int64 and weights [hi-lo, taps] int32 of output pixels lo..hi-1, kept on the
    device (built once per geometry: a per-call host-to-device copy from pageable memory would wait for the queue)."""
    starts, weights = pil_bicubic_taps(in_size, out_size)
    starts, weights = starts[lo:hi], weights[lo:hi]
    taps = max(len(w) for w in weights)
    idx = torch.tensor([[min(s + j, in_size - 1) for j in range(taps)] for s in starts], dtype=torch.int64)
    kk = torch.tensor([list(w) + [0] * (taps - len(w)) for w in weights], dtype=torch.int32)  # zero-padded taps
    return idx.to(device), kk.to(device)


def _resample_axis(x: torch.Tensor, dim: int, in_size: int, out_size: int, lo: int, hi: int) -> torch.Tensor:
    """Pillow's 8-bit bicubic pass along `dim` of int32 pixels, output pixels lo..hi-1 only -> int32 in 0..255."""
    idx, kk = _taps_on(x.device, in_size, out_size, lo, hi)
    taps = idx.shape[1]
    shape = [1] * x.dim()
    shape[dim] = hi - lo
    acc = None
    for j in range(taps):  # one tap at a time: memory stays at one output-sized int32 tensor
        term = x.index_select(dim, idx[:, j]) * kk[:, j].view(shape)
        acc = term if acc is None else acc.add_(term)
    acc.add_(1 << (_PIL_PRECISION_BITS - 1))
    return acc.bitwise_right_shift_(_PIL_PRECISION_BITS).clamp_(0, int(_U8_MAX))


def preprocess_uint8_tensor(frames_u8: torch.Tensor, size: int = IMAGE_SIZE) -> torch.Tensor:
    """uint8 [F, H, W, C] (C in 1, 3) -> uint8 [F, 3, size, size] crops on the frames' device, equal to
    `preprocess_uint8` (Pillow bicubic, horizontal pass then vertical, centre crop; only the cropped pixels are
    computed). RGBA frames (Pillow resizes them premultiplied) go through `preprocess_uint8` instead."""
    if not isinstance(frames_u8, torch.Tensor) or frames_u8.dtype != torch.uint8:
        raise TypeError(f"preprocess_uint8_tensor expects a uint8 tensor, got {getattr(frames_u8, 'dtype', type(frames_u8))}")
    if frames_u8.ndim != 4 or frames_u8.shape[-1] not in _PIL_MODES:
        raise ValueError(f"frames must be [F, H, W, C] with C in {sorted(_PIL_MODES)}, got shape {tuple(frames_u8.shape)}")
    n, height, width, channels = frames_u8.shape
    if channels == 4:
        return preprocess_uint8(frames_u8, size).to(frames_u8.device)
    if height < 1 or width < 1:
        raise ValueError(f"frames must be at least 1x1 pixels, got {height}x{width}")
    new_h, new_w = resized_hw(height, width, size)
    top, left = crop_offsets(new_h, new_w, size)
    x = frames_u8.permute(0, 3, 1, 2).to(torch.int32)  # [F, C, H, W]
    if new_w != width:  # Pillow: horizontal pass first (uint8 result), then vertical
        x = _resample_axis(x, 3, width, new_w, left, left + size)
    else:
        x = x[:, :, :, left:left + size]
    if new_h != height:
        x = _resample_axis(x, 2, height, new_h, top, top + size)
    else:
        x = x[:, :, top:top + size]
    x = x.to(torch.uint8)
    return (x.expand(-1, 3, -1, -1) if channels == 1 else x).contiguous()  # [F, 3, size, size]
