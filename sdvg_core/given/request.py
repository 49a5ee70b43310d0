"""Given pixels a run starts from: a start image, a video to extend, or a video to restyle block by block.

`PixelInput` is what a caller hands `GenerationSpec(pixels=...)`: the mode, the denoising strength (video-to-video
only), a streaming frame source and a digest naming the given pixels (the memo's root lineage holds it, so a change
of image reuses nothing). A source is a file (read with given/read.py, a few frames at a time) or a float tensor of
frames [T, H, W, 3] in [0, 1] (ComfyUI's IMAGE layout). Each constructor validates at once and raises one
`PixelInputError` (a ValueError) saying what is wrong and the fix; fitting to the run's size (centre crop + resize,
docs/pixels.md section 1) happens when the run starts, where the size is known.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol, Union

import torch

from .read import (DEFAULT_STRENGTH, PIECE_FRAMES, PixelInputError, as_vae_frames, check_aspect,
                            count_frames, image_size, probe_video, read_image, read_video)
from ..engine.prompts import tensor_digest
from ..engine.schedule import check_strength

PIXEL_MODES = ("start_image", "extend", "video_to_video")
FILE_HASH_CHUNK = 1 << 20  # bytes read at a time when hashing a file (never the whole file in memory)

ImageLike = Union[str, Path, torch.Tensor]


class FrameSource(Protocol):
    """Given frames, read a piece at a time and fitted to the run's size as VAE input [1, 3, t, H, W] in [-1, 1]."""

    name: str  # for messages: the file, or "IMAGE tensor"
    digest: str

    def source_hw(self) -> tuple[int, int]:
        """(height, width) of the frames as given (before fitting)."""

    def count(self) -> int:
        """Number of frames (a video file is decoded once to count them when its header does not say)."""

    def pieces(self, run_hw: tuple[int, int], start: int = 0, stop: int | None = None,
               piece_frames: int = PIECE_FRAMES) -> Iterator[torch.Tensor]:
        """Frames [start, stop) fitted to `run_hw`, in pieces of at most `piece_frames`."""


@dataclass(frozen=True)
class TensorFrames:
    """Frames held as a float tensor [T, H, W, 3] in [0, 1] (a ComfyUI IMAGE batch)."""

    frames: torch.Tensor = field(repr=False)
    digest: str
    name: str = "IMAGE tensor"

    def source_hw(self) -> tuple[int, int]:
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    def count(self) -> int:
        return int(self.frames.shape[0])

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        check_aspect(self.source_hw(), run_hw, self.name)
        stop = self.count() if stop is None else min(stop, self.count())
        for s in range(start, stop, piece_frames):
            yield as_vae_frames(self.frames[s:min(s + piece_frames, stop)], run_hw)


@dataclass(frozen=True)
class ImageFile:
    """A still image file (PNG, JPEG, WebP...): one frame."""

    path: Path
    digest: str
    hw: tuple[int, int]

    @property
    def name(self) -> str:
        return f"start image {self.path}"

    def source_hw(self) -> tuple[int, int]:
        return self.hw

    def count(self) -> int:
        return 1

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        if start == 0 and (stop is None or stop > 0):
            yield read_image(self.path, run_hw).unsqueeze(2)  # [1, 3, 1, H, W]


@dataclass(frozen=True)
class VideoFile:
    """A video file, decoded frame by frame with PyAV (never loaded whole)."""

    path: Path
    digest: str
    hw: tuple[int, int]
    header_frames: int | None = None

    @property
    def name(self) -> str:
        return f"input video {self.path}"

    def source_hw(self) -> tuple[int, int]:
        return self.hw

    def count(self) -> int:
        return count_frames(self.path)  # headers can be wrong: count what decodes

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        """Frames [start, stop): the frames before `start` are decoded and dropped (a reader that resumes)."""
        if stop is not None and stop <= start:
            return
        skipped = 0
        held: list[torch.Tensor] = []
        for piece in read_video(self.path, run_hw, max_frames=stop, piece_frames=piece_frames):
            t = piece.shape[2]
            if skipped + t <= start:
                skipped += t
                continue
            piece = piece[:, :, max(start - skipped, 0):]
            skipped = start
            held.append(piece)
            if sum(p.shape[2] for p in held) >= piece_frames:
                yield torch.cat(held, dim=2)
                held = []
        if held:
            yield torch.cat(held, dim=2)


def file_digest(path: Path) -> str:
    """Content hash of a file, read in chunks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(FILE_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _check_tensor(frames: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(frames, torch.Tensor):
        raise PixelInputError(f"{what} must be a file path or a float tensor of frames [T, H, W, 3] in [0, 1], got "
                              f"{type(frames).__name__}")
    if frames.dim() == 3:
        frames = frames.unsqueeze(0)  # one image [H, W, 3]
    if frames.dim() != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1 or frames.shape[1] < 1 or frames.shape[2] < 1:
        raise PixelInputError(f"{what} has shape {list(frames.shape)}; expected frames [T, H, W, 3] (ComfyUI IMAGE "
                              f"layout, RGB): drop the alpha channel or convert the layout")
    if not frames.is_floating_point():
        raise PixelInputError(f"{what} has dtype {frames.dtype}; expected float frames in [0, 1] (divide uint8 by 255)")
    lo, hi = float(frames.min()), float(frames.max())
    if not (0.0 <= lo and hi <= 1.0):  # NaN fails too
        raise PixelInputError(f"{what} has values in [{lo:g}, {hi:g}]; expected [0, 1] (ComfyUI IMAGE range): divide "
                              f"0..255 pixels by 255 or clamp")
    return frames.detach().to("cpu", torch.float32)


def image_source(image: ImageLike) -> FrameSource:
    """A start image: a file (read with Pillow) or a tensor whose frame 0 is used."""
    if isinstance(image, (str, Path)):
        path = Path(image)
        return ImageFile(path, file_digest(path), image_size(path))
    frames = _check_tensor(image, "start image")[:1]
    return TensorFrames(frames, tensor_digest(frames, "image"), "start image (IMAGE tensor)")


def video_source(video: ImageLike, what: str = "input video") -> FrameSource:
    """A video: a file (opened and its first frame decoded now) or a tensor of frames."""
    if isinstance(video, (str, Path)):
        info = probe_video(video)
        return VideoFile(info.path, file_digest(info.path), (info.height, info.width), info.frames)
    frames = _check_tensor(video, what)
    return TensorFrames(frames, tensor_digest(frames, "video"), f"{what} (IMAGE tensor)")


@dataclass(frozen=True)
class PixelInput:
    """Given pixels for a run (docs/pixels.md): `mode` in PIXEL_MODES, `strength` (1.0 unless video_to_video),
    `source` (streaming frames) and `digest` (their identity, for memo lineage). Build with `start_image`, `extend`
    or `video_to_video`."""

    mode: str
    source: FrameSource = field(repr=False, compare=False)
    strength: float = 1.0
    digest: str = ""

    def __post_init__(self):
        if self.mode not in PIXEL_MODES:
            raise PixelInputError(f"pixel input mode {self.mode!r} is not one of {PIXEL_MODES}")
        try:
            check_strength(self.strength)
        except ValueError as e:
            raise PixelInputError(str(e)) from None
        if self.mode != "video_to_video" and self.strength != 1.0:
            raise PixelInputError(f"a strength applies to video_to_video only; {self.mode} runs at full strength (1.0)")
        if not self.digest:
            object.__setattr__(self, "digest", self.source.digest)

    @classmethod
    def start_image(cls, image: ImageLike) -> "PixelInput":
        """Image-to-video: the video begins with `image` (a file path, or frames [T, H, W, 3] in [0, 1]: frame 0)."""
        return cls("start_image", image_source(image))

    @classmethod
    def extend(cls, video: ImageLike) -> "PixelInput":
        """Continue `video` (a file path, or frames [T, H, W, 3] in [0, 1]); the output begins with it."""
        return cls("extend", video_source(video, "video to extend"))

    @classmethod
    def video_to_video(cls, video: ImageLike, strength: float = DEFAULT_STRENGTH) -> "PixelInput":
        """Restyle `video` block by block, each input block noised at `strength` in [0, 1] (1 = from pure noise)."""
        try:
            strength = check_strength(strength)
        except (TypeError, ValueError) as e:
            raise PixelInputError(str(e)) from None
        return cls("video_to_video", video_source(video), strength)

    def identity(self) -> str:
        """What the memo's root lineage holds: mode, strength and the given pixels' digest."""
        return f"{self.mode}|s{self.strength!r}|{self.digest}"

    def check_fit(self, run_hw: tuple[int, int]) -> None:
        """Refuse (PixelInputError) pixels the fit rule would crop by more than half at the run's size."""
        check_aspect(self.source.source_hw(), run_hw, self.source.name)

    def report(self, given_frames: int) -> dict:
        """The report's `pixels` entry."""
        return {"mode": self.mode, "strength": self.strength, "given_frames": given_frames, "digest": self.digest}


__all__ = ["PIXEL_MODES", "DEFAULT_STRENGTH", "PixelInput", "PixelInputError", "FrameSource", "TensorFrames",
           "ImageFile", "VideoFile", "image_source", "video_source"]
