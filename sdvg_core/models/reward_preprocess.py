"""ImageReward's image preprocessing, exactly: uint8 -> PIL bicubic short side 224 -> centre crop -> CLIP norm."""
from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from PIL import Image

from .reward_config import CLIP_MEAN, CLIP_STD, IMAGE_SIZE

Uint8Mode = Literal["truncate", "round"]
UINT8_MODES: tuple[str, ...] = ("truncate", "round")
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
