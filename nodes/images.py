"""Conversions between SDVG's frames, PIL images and ComfyUI's IMAGE ([B, H, W, 3] float 0..1)."""
from __future__ import annotations

import torch

import comfy.model_management as mm


def to_pil(frame: torch.Tensor):
    """[H, W, 3] 0..1 -> PIL image (truncating, as ComfyUI's savers do)."""
    from PIL import Image

    return Image.fromarray((frame.detach().float().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy())


def to_image_batch(img) -> torch.Tensor:
    """PIL image -> ComfyUI IMAGE [1, H, W, 3] float 0..1."""
    import numpy as np

    return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0)[None]


def image_output(frames: torch.Tensor) -> torch.Tensor:
    """Frames [T, H, W, 3] as an IMAGE output: float32 on ComfyUI's intermediate device."""
    return frames.detach().to(mm.intermediate_device(), torch.float32)
