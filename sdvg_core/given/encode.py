"""How given pixels become the latents a run starts from: Krea's clip encode and start-frame encode (docs/pixels.md).

Both are one causal VAE encode from an empty cache (krea-ai/realtime-video `v2v.encode_video_latent`, `release_server.
GenerationSession.encode_v2v` / `setup_start_frame`; pinned by the pixels_tiny fixture, docs/pixels.md §2):
- a clip is cut to 1 + 4k frames, resized bicubically to the run's size rounded down to the VAE stride (an identity
  when it already has that size), encoded and normalised;
- a start image is repeated 1 + (context_frames - 1) * 4 times (9 for Krea's 3 context frames) and encoded like a
  clip, giving `context_frames` latent frames that seed the cache.
Pixels are in the VAE's [-1, 1] range, layout B C T H W; latents come back in the DiT's B F C h w layout. Reading
and fitting files to the run's size is `given/read.py`'s job; this module never changes the aspect.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn.functional as F

from ..models.vae import WanVAE

Interrupt = Callable[[], None] | None


def clip_frames(frames: int, temporal_compression: int = 4) -> int:
    """Pixel frames of a clip the encoder uses: the first frame + whole chunks of `temporal_compression` (1 + 4k)."""
    if frames <= 0:
        return 0
    return 1 + temporal_compression * ((frames - 1) // temporal_compression)


def start_frame_repeats(context_frames: int, temporal_compression: int = 4) -> int:
    """Times Krea repeats a start image so it encodes to `context_frames` latent frames: 1 + (ctx - 1) * 4 (9)."""
    if context_frames < 1:
        raise ValueError(f"a start frame needs at least 1 context latent frame, got {context_frames}")
    return 1 + (context_frames - 1) * temporal_compression


def resize_to_run(frames: torch.Tensor, size: tuple[int, int], stride: int) -> torch.Tensor:
    """Krea's resize: frames [B, 3, T, H, W] -> [B, 3, T, H', W'] with (H', W') = size rounded down to the VAE
    stride, bicubic (F.interpolate, align_corners False, no antialias); returned as is when already that size."""
    target = (size[0] // stride * stride, size[1] // stride * stride)
    if tuple(frames.shape[-2:]) == target:
        return frames
    b, c, t, h, w = frames.shape
    flat = frames.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w).float()  # [B T, 3, H, W]
    out = F.interpolate(flat, size=target, mode="bicubic", align_corners=False)
    return out.reshape(b, t, c, *target).permute(0, 2, 1, 3, 4).to(frames.dtype)


def encode_clip(vae: WanVAE, frames: torch.Tensor | Iterable[torch.Tensor], size: tuple[int, int],
                interrupt: Interrupt = None) -> torch.Tensor:
    """Krea's one-shot encode of a clip (`encode_v2v`): pixel frames [B, 3, T, H, W] in [-1, 1], or an iterable of
    such pieces read as the video goes -> normalised latents [B, F, C, h, w], F = 1 + (T - 1) // 4.

    Frames past the last whole chunk of 4 are dropped (Krea cuts the clip to 1 + 4k first); each piece is resized
    with `resize_to_run` and streamed through `WanVAE.encode_stream`, which gives the same bits as one call.
    """
    pieces = [frames] if isinstance(frames, torch.Tensor) else frames
    stride = vae.config.spatial_compression
    cache, outs = None, []
    for piece in pieces:
        latents, cache = vae.encode_stream(resize_to_run(piece, size, stride), cache, interrupt)
        outs.append(latents)
    if cache is None or cache.frames_consumed == 0:
        raise ValueError("the clip has no frames to encode")
    return torch.cat(outs, dim=2).permute(0, 2, 1, 3, 4)  # [B, C, F, h, w] -> [B, F, C, h, w]


def encode_start_frame(vae: WanVAE, image: torch.Tensor, size: tuple[int, int], context_frames: int = 3,
                       interrupt: Interrupt = None) -> torch.Tensor:
    """Krea's start image (`setup_start_frame`): image [B, 3, H, W] in [-1, 1], repeated
    `start_frame_repeats(context_frames)` times and encoded as a clip -> latents [B, context_frames, C, h, w]."""
    if image.dim() != 4:
        raise ValueError(f"expected a start image [B, 3, H, W], got {list(image.shape)}")
    repeats = start_frame_repeats(context_frames, vae.config.temporal_compression)
    clip = image.unsqueeze(2).expand(-1, -1, repeats, -1, -1)  # [B, 3, repeats, H, W], no copy
    return encode_clip(vae, clip, size, interrupt)
