"""Write frames [T, H, W, 3] in 0..1 to MP4 (imageio-ffmpeg, when installed) or animated WebP (Pillow)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

WAN_FPS = 16  # Wan 2.1 generates 16 frames per second


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    """0..1 float frames -> uint8 HWC frames, rounding to nearest (a display conversion)."""
    return (frames.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()


def write_video(frames: torch.Tensor, path: str | Path, fps: int = WAN_FPS) -> Path:
    """Write by extension: .mp4 (H.264 via imageio-ffmpeg) or .webp (lossless animated WebP)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = to_uint8(frames)
    if p.suffix.lower() == ".mp4":
        try:
            import imageio.v2 as imageio
        except ImportError as e:
            raise RuntimeError("writing .mp4 needs `pip install imageio imageio-ffmpeg`; or write .webp") from e
        with imageio.get_writer(str(p), fps=fps, codec="libx264", quality=8, pixelformat="yuv420p",
                                macro_block_size=2) as w:
            for f in data:
                w.append_data(f)
        return p
    if p.suffix.lower() == ".webp":
        from PIL import Image

        imgs = [Image.fromarray(f) for f in data]
        imgs[0].save(str(p), save_all=True, append_images=imgs[1:], duration=round(1000 / fps), loop=0, lossless=True)
        return p
    raise ValueError(f"{p}: unsupported video extension (use .mp4 or .webp)")
