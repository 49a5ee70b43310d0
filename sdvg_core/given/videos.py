"""Videos as they are: an input video read from a file a frame at a time, on the run's clock (docs/pixels.md §1).

- Decoded frame by frame with PyAV (`av`, ComfyUI's own video library; optional for the core: a clear error names it
  when missing), upright (the display matrix's rotation, as ffmpeg's autorotate), handed on in small pieces, so a
  minute of input is never one tensor.
- Time is kept: frames are resampled by their timestamps to the run's frame rate (`resample_times`: each output frame
  is the input frame nearest in time, as ffmpeg's fps filter and Krea's `load_video_as_rgb(resample_to=16)` do), so a
  30 fps or a variable-frame-rate clip keeps its duration; `fps=None` keeps every frame of the file as it is.
- A file that cannot be opened or has no frame is refused up front (`check_video`), and so is one whose container
  says it lasts longer than what decodes (`check_readable_until`: a seek to the last second a run needs, where the
  container allows seeking). A frame that fails to decode later raises `InputUnreadable` naming it, after every
  frame before it has been handed on: a run ends there as where an input runs out.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import numpy as np
import torch

from .errors import InputUnreadable, PixelInputError
from .fit import as_vae_frames, check_aspect

# Frames per piece `read_video` yields: one encoder chunk of the Wan VAE (4 pixel frames per latent frame).
PIECE_FRAMES = 4
KINDS = "an MP4, WebM, MOV or MKV file"
T = TypeVar("T")


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds, from its first decoded frame and its stream header."""

    path: Path
    height: int  # as displayed (after the file's rotation)
    width: int
    fps: float | None  # the stream's average frame rate, when it declares one
    frames: int | None  # frame count from the header (None when the container does not say)
    seconds: float | None = None  # duration from the header (None when the container does not say)


def _av():
    try:
        import av
    except ImportError:
        raise PixelInputError("reading a video file needs PyAV: `pip install av` (ComfyUI already ships it)") from None
    return av


def _rgb(frame) -> np.ndarray:
    """A decoded PyAV frame -> uint8 [H, W, 3] as displayed: the display matrix's rotation (counter-clockwise
    degrees, as ffmpeg's autorotate reads it) applied."""
    rgb = frame.to_ndarray(format="rgb24")
    quarter_turns = round(getattr(frame, "rotation", 0) / 90) % 4
    return np.ascontiguousarray(np.rot90(rgb, quarter_turns)) if quarter_turns else rgb


def _open(path: Path, what: str = "input video"):
    """The file opened as a container with a video stream, or one PixelInputError saying why not."""
    av = _av()
    if path.is_dir():
        raise PixelInputError(f"{what} {path} is a directory: give the video file itself ({KINDS})")
    if not path.is_file():
        raise PixelInputError(f"{what} {path} not found: give the path of {KINDS}")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise PixelInputError(f"{what} {path} cannot be opened as a video ({e}): give {KINDS}") from None
    if not container.streams.video:
        container.close()
        raise PixelInputError(f"{what} {path} has no video stream: give a video file")
    return container


def _frames(container, path: Path, what: str = "input video") -> Iterator[tuple[float | None, np.ndarray]]:
    """(time in seconds, uint8 [H, W, 3]) for every frame of the first video stream, decoded one at a time; a frame
    that fails to decode raises InputUnreadable naming it (the frames before it have been handed on)."""
    av = _av()
    frames = container.decode(container.streams.video[0])
    index, last = 0, None
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            return
        except (av.error.FFmpegError, OSError, ValueError) as e:
            at = f" (after {last:.2f} s)" if last is not None else ""
            raise InputUnreadable(f"{what} {path}: frame {index}{at} cannot be decoded ({e}): the file is damaged or "
                                  f"cut short; re-encode or trim it", index, last) from None
        last = frame.time if frame.time is not None else last
        yield frame.time, _rgb(frame)
        index += 1


def _decoded(path: Path, what: str = "input video") -> Iterator[tuple[float | None, np.ndarray]]:
    with _open(path, what) as container:
        yield from _frames(container, path, what)


def probe_video(path: str | os.PathLike, what: str = "input video") -> VideoInfo:
    """Open a video and decode its first frame (refusing a file that cannot be opened or has no frames)."""
    path = Path(path).expanduser()
    with _open(path, what) as container:
        stream = container.streams.video[0]
        try:
            first = next(_frames(container, path, what), None)
        except InputUnreadable as e:
            raise PixelInputError(str(e)) from None
        if first is None:
            raise PixelInputError(f"{what} {path} has no frames that can be decoded: give a video with frames")
        rate = stream.average_rate or stream.guessed_rate
        count = stream.frames or None
        seconds = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else (
            container.duration / 1e6 if container.duration else None)
    return VideoInfo(path, first[1].shape[0], first[1].shape[1], float(rate) if rate else None, count, seconds)


def check_video(path: str | os.PathLike, run_hw: tuple[int, int], what: str = "input video") -> VideoInfo:
    """Preflight an input video: opens, decodes, and is croppable to the run's size."""
    info = probe_video(path, what)
    check_aspect((info.height, info.width), run_hw, f"{what} {info.path}")
    return info


def check_readable_until(info: VideoInfo, seconds: float, what: str = "input video") -> None:
    """Refuse, up front, a file whose container says it lasts past `seconds` (capped at what it says) but where no
    frame decodes there: a file cut short after its index was written (an MP4 with the index first). Seeks, so only
    the frames around that time are decoded; a container that cannot seek is left to the run."""
    if info.seconds is None:
        return
    t = max(0.0, min(seconds, info.seconds) - (1.0 / info.fps if info.fps else 0.0))
    av = _av()
    with _open(info.path, what) as container:
        stream = container.streams.video[0]
        if not stream.time_base:
            return
        try:
            container.seek(int(t / stream.time_base), stream=stream, backward=True, any_frame=False)
            found = next((f.time for f in container.decode(stream) if f.time is not None and f.time >= t), None)
        except (av.error.FFmpegError, OSError, ValueError):
            found = None
    if found is None:
        raise PixelInputError(f"{what} {info.path} says it lasts {info.seconds:.2f} s, but no frame at {t:.2f} s "
                              f"(what the run reads) can be decoded: the file is damaged or cut short; re-encode or "
                              f"trim it")


def resample_times(frames: Iterable[tuple[float | None, T]], fps: float) -> Iterator[T]:
    """Frames at `fps` from timed frames, streaming: output frame n (at first time + n / fps) is the input frame
    nearest in time (ties to the earlier one), so frames are dropped or repeated as ffmpeg's fps filter does. Where
    the input breaks (InputUnreadable), the last good frame is handed on for its own time first."""
    step = 1.0 / fps
    prev: tuple[float, T] | None = None
    start = n = 0
    last_gap = step
    try:
        for t, img in frames:
            if t is None:
                raise PixelInputError("the video's frames carry no timestamps: it cannot be resampled to a frame "
                                      "rate (keep its frames as they are instead)")
            if prev is None:
                prev, start = (t, img), t
                continue
            last_gap = t - prev[0]
            while start + n * step <= (prev[0] + t) / 2:  # nearer to prev (or halfway): prev's turn
                yield prev[1]
                n += 1
            prev = (t, img)
    except InputUnreadable:  # the frame after prev cannot be decoded: prev keeps its own slot, then the error
        while prev is not None and start + n * step <= prev[0] + last_gap / 2:
            yield prev[1]
            n += 1
        raise
    if prev is not None:  # the last frame lasts as long as the gap before it: the video ends there
        while start + n * step < prev[0] + last_gap:
            yield prev[1]
            n += 1


def timed_frames(path: str | os.PathLike, fps: float | None, what: str = "input video") -> Iterator[np.ndarray]:
    """The frames of a file on the run's clock (resampled to `fps` by their timestamps; None: every frame as is)."""
    timed = _decoded(Path(path).expanduser(), what)
    return resample_times(timed, fps) if fps else (img for _, img in timed)


def count_frames(path: str | os.PathLike, fps: float | None = None, what: str = "input video") -> int:
    """Frames of a video that decode (headers can be missing or wrong), on the run's clock, decoded and dropped."""
    return sum(1 for _ in timed_frames(path, fps, what))


def read_video(path: str | os.PathLike, run_hw: tuple[int, int], *, fps: float | None = None,
               max_frames: int | None = None, piece_frames: int = PIECE_FRAMES,
               what: str = "input video") -> Iterator[torch.Tensor]:
    """An input video as VAE input pieces [1, 3, t, H, W] in [-1, 1] at the run's size, t <= piece_frames, read and
    converted a piece at a time (feed them to `WanVAE.encode_stream`). `fps` resamples by time (`resample_times`;
    None keeps every frame of the file); `max_frames` stops reading after that many frames. A frame that cannot be
    decoded: the frames before it come first, then InputUnreadable."""
    path = Path(path).expanduser()
    if piece_frames < 1:
        raise ValueError(f"piece_frames must be at least 1, got {piece_frames}")
    if max_frames is not None and max_frames < 1:
        return
    batch: list[np.ndarray] = []
    done = 0
    try:
        for img in timed_frames(path, fps, what):
            if done == 0:
                check_aspect(img.shape[:2], run_hw, f"{what} {path}")
            batch.append(img)
            done += 1
            if len(batch) == piece_frames or done == max_frames:
                yield as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw)
                batch = []
            if done == max_frames:
                return
    except InputUnreadable:
        if batch:
            yield as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw)
        raise
    if batch:
        yield as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw)


__all__ = ["PIECE_FRAMES", "VideoInfo", "probe_video", "check_video", "check_readable_until", "count_frames",
           "resample_times", "timed_frames", "read_video"]
