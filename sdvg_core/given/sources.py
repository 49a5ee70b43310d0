"""Where given frames come from: a picture file, a video file, or ComfyUI IMAGE frames (a float tensor [T, H, W, 3]
in [0, 1]). Every source hands frames on the run's clock (16 fps: `RUN_FPS`), a few at a time, fitted to the run's size
as VAE input [1, 3, t, H, W] in [-1, 1], and has a digest naming exactly those frames (the memo's lineage holds it:
other pixels, or the same file on another clock, reuse nothing)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Iterator, Protocol, Union

import torch

from ..derived.digest import tensor_digest
from ..io.video import WAN_FPS
from .errors import InputUnreadable, PixelInputError
from .fit import as_vae_frames, check_aspect
from .images import fitted_image, image_info
from .videos import (PIECE_FRAMES, VideoInfo, check_readable_until, no_timestamps, probe_video, read_video,
                     resample_times, timed_frames)

RUN_FPS = WAN_FPS  # the clock given frames are read on: Wan 2.1's 16 frames per second
FILE_HASH_CHUNK = 1 << 20  # bytes read at a time when hashing a file (never the whole file in memory)

ImageLike = Union[str, Path, torch.Tensor]


class FrameSource(Protocol):
    """Given frames, read a piece at a time and fitted to the run's size as VAE input [1, 3, t, H, W] in [-1, 1]."""

    name: str  # for messages: the file, or "IMAGE tensor"
    digest: str

    def source_hw(self) -> tuple[int, int]:
        """(height, width) of the frames as given (before fitting)."""

    def count(self) -> int:
        """Number of frames on the run's clock (a video file is decoded once to count them)."""

    def count_up_to(self, n: int) -> int:
        """Frames on the run's clock, counted no further than n (a video file decodes at most what that takes;
        optional: a source without it is not counted before the run)."""

    def pieces(self, run_hw: tuple[int, int], start: int = 0, stop: int | None = None,
               piece_frames: int = PIECE_FRAMES) -> Iterator[torch.Tensor]:
        """Frames [start, stop) fitted to `run_hw`, in pieces of at most `piece_frames`."""

    def timing(self) -> dict:
        """{"source_fps": the frames' own rate (None: unknown), "frame_rate": the rate they are read at (RUN_FPS when
        resampled, None when kept as they are)}."""


def on_clock(keep_frames: bool) -> float | None:
    """The rate a video file's frames are resampled to by their timestamps: RUN_FPS, or None (kept as they are)."""
    return None if keep_frames else RUN_FPS


@dataclass(frozen=True)
class TensorFrames:
    """Frames held as a float tensor [T, H, W, 3] in [0, 1] (a ComfyUI IMAGE batch); `fps`: their own rate (None:
    taken as the run's), resampled to `rate` by time when it is set."""

    frames: torch.Tensor = field(repr=False)
    digest: str
    name: str = "IMAGE tensor"
    fps: float | None = None
    rate: float | None = None

    @cached_property
    def _index(self) -> list[int]:
        """Which given frame each frame on the run's clock is (all of them, in order, without resampling)."""
        n = int(self.frames.shape[0])
        if not self.rate or not self.fps:
            return list(range(n))
        return list(resample_times(((Fraction(i) / Fraction(self.fps), i) for i in range(n)), self.rate))

    def source_hw(self) -> tuple[int, int]:
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    def count(self) -> int:
        return len(self._index)

    def count_up_to(self, n: int) -> int:
        return min(n, self.count())

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        check_aspect(self.source_hw(), run_hw, self.name)
        idx = self._index[start:stop]
        for s in range(0, len(idx), piece_frames):
            yield as_vae_frames(self.frames[idx[s:s + piece_frames]], run_hw)

    def timing(self) -> dict:
        return {"source_fps": self.fps, "frame_rate": self.rate}


@dataclass(frozen=True)
class ImageFile:
    """A still image file (PNG, JPEG, WebP...): one frame, decoded once per run size (given/images.py)."""

    path: Path
    digest: str
    hw: tuple[int, int]
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"start image {self.path}"

    def source_hw(self) -> tuple[int, int]:
        return self.hw

    def count(self) -> int:
        return 1

    def count_up_to(self, n: int) -> int:
        return min(n, 1)

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        if start == 0 and (stop is None or stop > 0):
            yield fitted_image(self.path, run_hw).unsqueeze(2)  # [1, 3, 1, H, W]

    def timing(self) -> dict:
        return {"source_fps": None, "frame_rate": None}

    def check_readable(self, run_hw: tuple[int, int], frames: int | None) -> None:
        """Decode it now (reduced to the run's size, kept for the run: a picture is decoded once)."""
        fitted_image(self.path, run_hw)


@dataclass(frozen=True)
class VideoFile:
    """A video file, decoded frame by frame with PyAV (never loaded whole), resampled to `rate` by its timestamps
    (None: every frame as it is)."""

    path: Path
    digest: str
    hw: tuple[int, int]  # as shown: upright, its pixels' aspect applied
    header_frames: int | None = None
    fps: float | None = None  # the file's average frame rate (its header)
    rate: float | None = RUN_FPS
    what: str = "input video"
    seconds: float | None = None  # how long its header says it lasts from its first frame
    start: Fraction | None = Fraction(0)  # its first frame's time (None: its frames carry no timestamps)
    pixel_aspect: float = 1.0  # a stored pixel's width / height as shown

    @property
    def name(self) -> str:
        return f"{self.what} {self.path}"

    def source_hw(self) -> tuple[int, int]:
        return self.hw

    def count(self) -> int:
        return sum(1 for _ in timed_frames(self.path, self.rate, self.what))  # headers can be wrong: count what decodes

    def count_up_to(self, n: int) -> int:
        return sum(1 for _ in islice(timed_frames(self.path, self.rate, self.what), n))

    def check_readable(self, run_hw: tuple[int, int], frames: int | None) -> None:
        """Refuse a file cut short before the `frames` the run reads (None: all of it): the end they need (the last
        one's slot half filled, as ffmpeg's count rounds) must be found where the header says it is."""
        rate = self.rate or self.fps or RUN_FPS
        needs = None if frames is None else (Fraction(frames) - Fraction(1, 2)) / Fraction(rate)
        check_readable_until(self.info, needs, self.what)

    @property
    def info(self) -> VideoInfo:
        return VideoInfo(self.path, *self.hw, self.fps, self.header_frames, self.seconds, self.start, self.pixel_aspect)

    def pieces(self, run_hw, start=0, stop=None, piece_frames=PIECE_FRAMES):
        """Frames [start, stop): the frames before `start` are decoded and dropped (a reader that resumes). A frame
        that cannot be decoded: the frames before it come first, then InputUnreadable."""
        if stop is not None and stop <= start:
            return
        skipped = 0
        held: list[torch.Tensor] = []
        try:
            for piece in read_video(self.path, run_hw, fps=self.rate, max_frames=stop, piece_frames=piece_frames,
                                    what=self.what, pixel_aspect=self.pixel_aspect):
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
        except InputUnreadable:
            if held:
                yield torch.cat(held, dim=2)
            raise
        if held:
            yield torch.cat(held, dim=2)

    def timing(self) -> dict:
        return {"source_fps": self.fps, "frame_rate": self.rate}


def file_digest(path: Path) -> str:
    """Content hash of a file, read in chunks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(FILE_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _clocked(digest: str, rate: float | None) -> str:
    """A digest naming the frames as read: on the run's clock, a resampled video is other frames than the file's."""
    return digest if rate is None else f"{digest}@{rate:g}fps"


def check_tensor(frames: torch.Tensor, what: str) -> torch.Tensor:
    """ComfyUI IMAGE frames [T, H, W, 3] (or one image [H, W, 3]) in [0, 1], as float32 on the CPU; else one
    PixelInputError saying what is wrong and the fix."""
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
    """A start image: a file (its header read now, its pixels when the run starts) or a tensor whose frame 0 is used."""
    if isinstance(image, (str, Path)):
        info = image_info(image)
        return ImageFile(info.path, file_digest(info.path), (info.height, info.width), info.notes)
    frames = check_tensor(image, "start image")[:1]
    return TensorFrames(frames, tensor_digest(frames, "image"), "start image (IMAGE tensor)")


def check_fps(fps: float | None, what: str) -> float | None:
    """A frame rate the caller gives for frames (None: not given)."""
    if fps is None:
        return None
    try:
        fps = float(fps)
    except (TypeError, ValueError):
        raise PixelInputError(f"{what}: fps {fps!r} is not a number (frames per second, e.g. 30)") from None
    if not fps > 0 or fps == float("inf"):
        raise PixelInputError(f"{what}: fps {fps:g} must be a positive number of frames per second")
    return fps


def video_source(video: ImageLike, what: str = "input video", fps: float | None = None,
                 keep_frames: bool = False) -> FrameSource:
    """A video: a file (opened and its first frame decoded now; read on the run's clock unless `keep_frames`) or a
    tensor of frames (at `fps` frames per second when given, resampled to the run's clock; else taken as they are)."""
    if isinstance(video, (str, Path)):
        info = probe_video(video, what)
        rate = on_clock(keep_frames)
        if rate is not None and not info.timestamped:
            raise PixelInputError(no_timestamps(info.path, what))
        return VideoFile(info.path, _clocked(file_digest(info.path), rate), (info.height, info.width), info.frames,
                         info.fps, rate, what, info.seconds, info.start, info.pixel_aspect)
    frames = check_tensor(video, what)
    fps = check_fps(fps, what)
    rate = None if fps is None or fps == RUN_FPS else on_clock(keep_frames)  # at the run's rate: as they are
    digest = tensor_digest(frames, "video")  # frames at another rate are other frames on the run's clock
    return TensorFrames(frames, digest if rate is None else f"{digest}@{fps:g}>{rate:g}fps", f"{what} (IMAGE tensor)",
                        fps, rate)


__all__ = ["RUN_FPS", "FrameSource", "TensorFrames", "ImageFile", "VideoFile", "file_digest", "check_tensor",
           "image_source", "video_source", "on_clock"]
