"""Write frames [T, H, W, 3] in 0..1 to MP4 (imageio-ffmpeg, when installed) or animated WebP (Pillow).

`VideoWriter` takes frames block by block as a generation commits them, so a long video never sits in memory
as float frames: MP4 frames go straight to the encoder; WebP (Pillow writes it in one go) keeps uint8 frames.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

WAN_FPS = 16  # Wan 2.1 generates 16 frames per second
EXTENSIONS = (".mp4", ".webp")


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    """0..1 float frames -> uint8 HWC frames, rounding to nearest (a display conversion)."""
    return (frames.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()


class VideoWriter:
    """Append frames [T, H, W, 3] in 0..1 as they come; `close()` (or leaving the `with` block) finishes the file."""

    def __init__(self, path: str | Path, fps: int = WAN_FPS):
        self.path = Path(path)
        self.fps = fps
        self.frames_written = 0
        suffix = self.path.suffix.lower()
        if suffix not in EXTENSIONS:
            raise ValueError(f"{self.path}: unsupported video extension (use .mp4 or .webp)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._mp4 = None
        self._webp: list[np.ndarray] = []
        if suffix == ".mp4":
            try:
                import imageio.v2 as imageio
            except ImportError as e:
                raise RuntimeError("writing .mp4 needs `pip install imageio imageio-ffmpeg`; or write .webp") from e
            self._mp4 = imageio.get_writer(str(self.path), fps=fps, codec="libx264", quality=8,
                                           pixelformat="yuv420p", macro_block_size=2)

    def write(self, frames: torch.Tensor) -> None:
        for f in to_uint8(frames):
            if self._mp4 is not None:
                self._mp4.append_data(f)
            else:
                self._webp.append(f)
            self.frames_written += 1

    def close(self) -> Path:
        if self._mp4 is not None:
            self._mp4.close()
            self._mp4 = None
        elif self._webp:
            from PIL import Image

            imgs = [Image.fromarray(f) for f in self._webp]
            imgs[0].save(str(self.path), save_all=True, append_images=imgs[1:], duration=round(1000 / self.fps),
                         loop=0, lossless=True)
            self._webp = []
        return self.path

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_video(frames: torch.Tensor, path: str | Path, fps: int = WAN_FPS) -> Path:
    """Write by extension: .mp4 (H.264 via imageio-ffmpeg) or .webp (lossless animated WebP)."""
    with VideoWriter(path, fps) as w:
        w.write(frames)
    return w.path
