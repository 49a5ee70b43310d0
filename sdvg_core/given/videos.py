"""Videos as they are: an input video read from a file a frame at a time, on the run's clock (docs/pixels.md §1).

- Decoded frame by frame with PyAV (`av`, ComfyUI's own video library; optional for the core: a clear error names it
  when missing), upright (the display matrix's rotation, as ffmpeg's autorotate) and with its pixels' shape (a sample
  aspect ratio other than 1:1 is stretched out as a player shows it, by the fit rule's one resize), handed on in
  small pieces, so a minute of input is never one tensor.
- Time is kept: frames are resampled by their timestamps to the run's frame rate (`resample_times`: each output frame
  is the input frame nearest in time, and there are as many as ffmpeg's fps filter makes: round(rate x duration)),
  so a 30 fps or a variable-frame-rate clip keeps its duration; `fps=None` keeps every frame of the file as it is. A
  stream whose frames carry no timestamps (a raw .h264 file) cannot be put on a clock: refused up front, naming how
  to read its frames as they are.
- A file that cannot be opened, has no frame, or is a picture is refused up front (`check_video`), and so is one
  whose header says it lasts longer than what can be read (`check_readable_until`: the end the run needs is looked for
  where the stream's own clock puts it, by a seek and a few decoded frames, or, where a seek decodes nothing (a
  stream with few keyframes), by reading the packets; the header's rounding to its time base is allowed for). A frame
  that fails to decode later raises `InputUnreadable` naming it, after every frame before it has been handed on: a
  run ends there as where an input runs out.
"""
from __future__ import annotations

import math
import os
import re
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import numpy as np
import torch

from .errors import InputUnreadable, PixelInputError, refuse_url
from .fit import as_vae_frames, check_aspect, shown_hw

# Frames per piece `read_video` yields: one encoder chunk of the Wan VAE (4 pixel frames per latent frame).
PIECE_FRAMES = 4
KINDS = "an MP4, WebM, MOV or MKV file"
# A video whose frames end this much short of what its header says still lasts that long: container times are
# rounded to their time base (WebM / MKV: whole milliseconds, both each frame's time and the duration), so the last
# frame's end can fall a millisecond or two short. Half a frame of the input, at least END_SLACK_MIN seconds: a file
# cut short loses far more.
END_SLACK_FRAMES = 0.5
END_SLACK_MIN = Fraction(2, 1000)
# PyAV's name for a demuxer that reads one picture (png_pipe, jpeg_pipe, webp_pipe, ...; image2 for a pattern).
PICTURE_DEMUXERS = re.compile(r"(.+_pipe|image2)$")
MATROSKA_DURATION = re.compile(r"^(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")  # a WebM / MKV track's DURATION tag
MATROSKA_DEMUXER = re.compile(r"(^|,)(matroska|webm)(,|$)")  # its durations are the segment's end, not a length
T = TypeVar("T")


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds, from its first decoded frame and its stream header."""

    path: Path
    height: int  # as displayed: after the file's rotation and its pixels' aspect
    width: int
    fps: float | None  # the stream's average frame rate, when it declares one
    frames: int | None  # frame count from the header (None when the container does not say)
    seconds: float | None = None  # how long the header says it lasts from its first frame (None: it does not say)
    start: Fraction | None = Fraction(0)  # the first frame's time on the stream's clock (None: no timestamps)
    pixel_aspect: float = 1.0  # width / height of a stored pixel as shown upright (1: square pixels)

    @property
    def timestamped(self) -> bool:
        return self.start is not None


def _av():
    try:
        import av
    except ImportError:
        raise PixelInputError("reading a video file needs PyAV: `pip install av` (ComfyUI already ships it)") from None
    return av


def _quarter_turns(frame) -> int:
    """Counter-clockwise quarter turns of the display matrix (as ffmpeg's autorotate reads it)."""
    return round(getattr(frame, "rotation", 0) / 90) % 4


def _rgb(frame) -> np.ndarray:
    """A decoded PyAV frame -> uint8 [H, W, 3] upright: the display matrix's rotation applied."""
    rgb = frame.to_ndarray(format="rgb24")
    quarter_turns = _quarter_turns(frame)
    return np.ascontiguousarray(np.rot90(rgb, quarter_turns)) if quarter_turns else rgb


def _time(frame) -> Fraction | None:
    """The frame's time in seconds, exactly (its pts in its time base), or None when it carries none."""
    if frame.pts is None or not frame.time_base:
        return None
    return Fraction(frame.pts) * Fraction(frame.time_base)


def _duration(frame) -> Fraction | None:
    """How long the frame is shown, from its container (None: not said)."""
    d = getattr(frame, "duration", None)
    return Fraction(d) * Fraction(frame.time_base) if d and frame.time_base else None


def no_timestamps(path: Path, what: str) -> str:
    return (f"{what} {path} carries no timestamps on its frames (a raw .h264 / .hevc stream has none), so it cannot be "
            f"put on the run's 16 fps clock: read its frames as they are (--keep-frames; keep_frames=true in a prompt "
            f"row, keep_frames=True in the API), or put it in a container at its real rate first (ffmpeg -r 30 -i "
            f"{path.name} -c copy clip.mp4)")


def _open(path: Path, what: str = "input video"):
    """The file opened as a container with a video stream, or one PixelInputError saying why not."""
    av = _av()
    refuse_url(path, what, KINDS)
    if path.is_dir():
        raise PixelInputError(f"{what} {path} is a directory: give the video file itself ({KINDS})")
    if not path.is_file():
        raise PixelInputError(f"{what} {path} not found: give the path of {KINDS}")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise PixelInputError(f"{what} {path} cannot be opened as a video ({e}): give {KINDS}") from None
    if PICTURE_DEMUXERS.fullmatch(container.format.name or ""):
        container.close()
        raise PixelInputError(f"{what} {path} is a picture, not a video: start the video from it as the start image "
                              f"(--start-image, start_image=), or give {KINDS}")
    if not container.streams.video:
        container.close()
        raise PixelInputError(f"{what} {path} has no video stream: give a video file")
    return container


def _frames(container, path: Path, what: str = "input video"
            ) -> Iterator[tuple[Fraction | None, np.ndarray, Fraction | None]]:
    """(time in seconds, uint8 [H, W, 3], duration) for every frame of the first video stream, decoded one at a time;
    a frame that fails to decode raises InputUnreadable naming it (the frames before it have been handed on)."""
    av = _av()
    frames = container.decode(container.streams.video[0])
    index, last = 0, None
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            return
        except (av.error.FFmpegError, OSError, ValueError) as e:
            at = f" (after {float(last):.2f} s)" if last is not None else ""
            raise InputUnreadable(f"{what} {path}: frame {index}{at} cannot be decoded ({e}): the file is damaged or "
                                  f"cut short; re-encode or trim it", index, None if last is None else float(last)
                                  ) from None
        t = _time(frame)
        last = t if t is not None else last
        yield t, _rgb(frame), _duration(frame)
        index += 1


def _decoded(path: Path, what: str = "input video") -> Iterator[tuple[Fraction | None, np.ndarray, Fraction | None]]:
    with _open(path, what) as container:
        yield from _frames(container, path, what)


def _header_end(container, stream) -> Fraction | None:
    """When the header says the video stream ends, on its own clock: the stream's duration, a WebM / MKV track's
    DURATION tag, else the container's (which counts every stream); None when nothing says."""
    tb = Fraction(stream.time_base) if stream.time_base else None
    begin = Fraction(stream.start_time) * tb if tb and stream.start_time is not None else Fraction(0)
    if tb and stream.duration:
        return begin + Fraction(stream.duration) * tb
    # Matroska's segment duration and its muxers' DURATION tags run from time 0, so they end a stream that starts
    # late (a cut or remuxed recording) where they say; a value before the stream's start can only be a length
    segment_end = bool(MATROSKA_DEMUXER.search(container.format.name or ""))
    tag = MATROSKA_DURATION.match(str((stream.metadata or {}).get("DURATION", "")).strip())
    if tag:
        h, m, s = tag.groups()
        said = int(h) * 3600 + int(m) * 60 + Fraction(s)
    elif container.duration:
        begin = Fraction(container.start_time or 0, 1_000_000)
        said = Fraction(container.duration, 1_000_000)
    else:
        return None
    return said if segment_end and said > begin else begin + said


def _pixel_aspect(stream, frame) -> float:
    """Width / height of a stored pixel as shown upright: the sample aspect ratio (1 where unset), inverted by a
    quarter turn."""
    sar = stream.sample_aspect_ratio or getattr(stream.codec_context, "sample_aspect_ratio", None)
    sar = float(sar) if sar else 1.0
    sar = sar if sar > 0 else 1.0
    return sar if _quarter_turns(frame) % 2 == 0 else 1.0 / sar


def probe_video(path: str | os.PathLike, what: str = "input video") -> VideoInfo:
    """Open a video and decode its first frame (refusing a file that cannot be opened, is a picture or has no
    frames)."""
    refuse_url(path, what, KINDS)
    path = Path(path).expanduser()
    with _open(path, what) as container:
        stream = container.streams.video[0]
        first = None
        try:
            for frame in container.decode(stream):
                first = frame
                break
        except (_av().error.FFmpegError, OSError, ValueError) as e:
            raise PixelInputError(f"{what} {path}: frame 0 cannot be decoded ({e}): the file is damaged or cut short; "
                                  f"re-encode or trim it") from None
        if first is None:
            raise PixelInputError(f"{what} {path} has no frames that can be decoded: give a video with frames")
        rgb, start, aspect = _rgb(first), _time(first), _pixel_aspect(stream, first)
        rate = stream.average_rate or stream.guessed_rate
        count = stream.frames or None
        end = _header_end(container, stream) if start is not None else None
        seconds = float(end - start) if end is not None and end > start else None
    h, w = shown_hw(rgb.shape[:2], aspect)
    return VideoInfo(path, h, w, float(rate) if rate else None, count, seconds, start, aspect)


def check_video(path: str | os.PathLike, run_hw: tuple[int, int], what: str = "input video") -> VideoInfo:
    """Preflight an input video: opens, decodes, and is croppable to the run's size."""
    info = probe_video(path, what)
    check_aspect((info.height, info.width), run_hw, f"{what} {info.path}")
    return info


def _latest_end(info: VideoInfo, target: Fraction, ends) -> Fraction | None:
    """The latest of the end times `ends(container, stream, time_base)` yields, stopping at the first that reaches
    `target`; None when it yields none (or the stream has no time base). A read error ends the walk."""
    av = _av()
    best = None
    with _open(info.path) as container:
        stream = container.streams.video[0]
        if not stream.time_base:
            return None
        try:
            for end in ends(container, stream, Fraction(stream.time_base)):
                best = end if best is None else max(best, end)
                if best >= target:
                    break
        except (av.error.FFmpegError, OSError, ValueError):
            pass
    return best


def _end_after_seek(info: VideoInfo, target: Fraction) -> Fraction | None:
    """The latest end (time + duration) of the frames decoded from a seek to `target` on, stopping at the first that
    reaches it; None when the seek decodes no frame (few keyframes: a decoder needs one before it gives a frame)."""
    def ends(container, stream, tb):
        container.seek(math.floor(target / tb), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            t = _time(frame)
            if t is not None:
                yield t + (_duration(frame) or _frame_time(info))

    return _latest_end(info, target, ends)


def _end_of_packets(info: VideoInfo, target: Fraction) -> Fraction | None:
    """The latest end of the video packets read from the start (no decoding), stopping at the first that reaches
    `target`: where the data itself stops."""
    def ends(container, stream, tb):
        for packet in container.demux(stream):
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is not None:
                yield Fraction(ts) * tb + (Fraction(packet.duration) * tb if packet.duration else _frame_time(info))

    return _latest_end(info, target, ends)


def _frame_time(info: VideoInfo) -> Fraction:
    """One frame's time at the file's rate (0 when it declares none)."""
    return 1 / Fraction(info.fps) if info.fps else Fraction(0)


def check_readable_until(info: VideoInfo, seconds: float | None = None, what: str = "input video") -> None:
    """Refuse, up front, a file whose header says it lasts past `seconds` from its first frame (None: as long as it
    says) but whose frames stop before: a file cut short after its header or index was written (an MP4 with the
    index first, a WebM whose duration was written at the start). The end is looked for on the stream's own clock (a
    stream may start late) by a seek and the frames decoded from there, or, where the seek decodes nothing (one
    keyframe in the file), by reading the packets; a frame ending within the header's rounding counts."""
    if info.seconds is None or info.start is None:
        return
    need = Fraction(info.seconds) if seconds is None else min(Fraction(seconds), Fraction(info.seconds))
    slack = max(END_SLACK_MIN, END_SLACK_FRAMES * _frame_time(info))
    target = info.start + max(Fraction(0), need - slack)
    found = _end_after_seek(info, target)
    if found is None:
        found = _end_of_packets(info, target)
    if found is None or found < target:
        upto = "nothing can be read" if found is None else f"it stops at {float(found - info.start):.2f} s"
        raise PixelInputError(f"{what} {info.path} says it lasts {info.seconds:.2f} s, but {upto}, before the "
                              f"{float(need):.2f} s the run reads: the file is damaged or cut short; re-encode or "
                              f"trim it")


def _exact(x) -> Fraction:
    return x if isinstance(x, Fraction) else Fraction(x)


def _timed(item) -> tuple[Fraction | None, object, Fraction | None]:
    """(time, frame, duration) of an item given as (time, frame) or (time, frame, duration)."""
    t, frame, *rest = item
    dur = rest[0] if rest else None
    return (None if t is None else _exact(t)), frame, (_exact(dur) if dur else None)


def clock_frames(seconds, fps) -> int:
    """Frames a video lasting `seconds` makes on a `fps` clock: round(fps x seconds), halves up, as ffmpeg's fps filter
    counts them (its default rounding, `round=near`, applied to the end of the last frame)."""
    return math.floor(_exact(seconds) * _exact(fps) + Fraction(1, 2))


def resample_times(frames: Iterable[tuple], fps: float) -> Iterator[T]:
    """Frames at `fps` from timed frames ((time, frame) or (time, frame, duration)), streaming: output frame n (at
    first time + n / fps) is the input frame nearest in time (ties to the earlier one), and there are
    `clock_frames(duration, fps)` of them, as many as ffmpeg's fps filter makes (the video lasts until the last frame's
    end: its own duration, else the gap before it). A frame is handed on only once the input is known to last past
    its slot's half (so the count never overshoots). Where the input breaks (InputUnreadable), the last good frame is
    handed on for its own time first."""
    step = 1 / _exact(fps)
    prev: tuple[Fraction, T, Fraction | None] | None = None
    start = Fraction(0)
    n = 0  # the next slot to assign
    last_gap = step
    pending: deque[tuple[int, T]] = deque()  # slots assigned, waiting until the input outlasts them

    def outlasted(slot: int, t: Fraction) -> bool:  # a frame at t: the input lasts past this slot's half
        return start + (slot + Fraction(1, 2)) * step <= t

    try:
        for item in frames:
            t, img, dur = _timed(item)
            if t is None:
                raise PixelInputError("the video's frames carry no timestamps: it cannot be resampled to a frame "
                                      "rate (keep its frames as they are instead)")
            if prev is None:
                prev, start = (t, img, dur), t
                continue
            last_gap = t - prev[0]
            while start + n * step <= (prev[0] + t) / 2:  # nearer to prev (or halfway): prev's turn
                pending.append((n, prev[1]))
                n += 1
            prev = (t, img, dur)
            while pending and outlasted(pending[0][0], t):
                yield pending.popleft()[1]
    except InputUnreadable:  # the frame after prev cannot be decoded: prev keeps its own slot, then the error
        while pending:
            yield pending.popleft()[1]
        while prev is not None and start + n * step <= prev[0] + last_gap / 2:
            yield prev[1]
            n += 1
        raise
    if prev is None:
        return
    total = clock_frames(prev[0] + (prev[2] or last_gap) - start, 1 / step)  # the video ends with its last frame
    while pending and pending[0][0] < total:
        yield pending.popleft()[1]
    while n < total:
        yield prev[1]
        n += 1


def timed_frames(path: str | os.PathLike, fps: float | None, what: str = "input video") -> Iterator[np.ndarray]:
    """The frames of a file on the run's clock (resampled to `fps` by their timestamps; None: every frame as is)."""
    path = Path(path).expanduser()
    decoded = _decoded(path, what)
    if not fps:
        return (img for _, img, _ in decoded)

    def stamped():
        for t, img, dur in decoded:
            if t is None:
                raise PixelInputError(no_timestamps(path, what))
            yield t, img, dur

    return resample_times(stamped(), fps)


def count_frames(path: str | os.PathLike, fps: float | None = None, what: str = "input video") -> int:
    """Frames of a video that decode (headers can be missing or wrong), on the run's clock, decoded and dropped."""
    return sum(1 for _ in timed_frames(path, fps, what))


def read_video(path: str | os.PathLike, run_hw: tuple[int, int], *, fps: float | None = None,
               max_frames: int | None = None, piece_frames: int = PIECE_FRAMES,
               what: str = "input video", pixel_aspect: float | None = None) -> Iterator[torch.Tensor]:
    """An input video as VAE input pieces [1, 3, t, H, W] in [-1, 1] at the run's size, t <= piece_frames, read and
    converted a piece at a time (feed them to `WanVAE.encode_stream`). `fps` resamples by time (`resample_times`;
    None keeps every frame of the file); `max_frames` stops reading after that many frames; `pixel_aspect`: the
    stored pixels' shape as shown (None: read from the file). A frame that cannot be decoded: the frames before it
    come first, then InputUnreadable."""
    path = Path(path).expanduser()
    if piece_frames < 1:
        raise ValueError(f"piece_frames must be at least 1, got {piece_frames}")
    if max_frames is not None and max_frames < 1:
        return
    if pixel_aspect is None:
        pixel_aspect = probe_video(path, what).pixel_aspect
    batch: list[np.ndarray] = []
    done = 0

    def piece() -> torch.Tensor:
        return as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw, pixel_aspect)

    try:
        for img in timed_frames(path, fps, what):
            if done == 0:
                check_aspect(shown_hw(img.shape[:2], pixel_aspect), run_hw, f"{what} {path}")
            batch.append(img)
            done += 1
            if len(batch) == piece_frames or done == max_frames:
                yield piece()
                batch = []
            if done == max_frames:
                return
    except InputUnreadable:
        if batch:
            yield piece()
        raise
    if batch:
        yield piece()


__all__ = ["PIECE_FRAMES", "VideoInfo", "probe_video", "check_video", "check_readable_until", "count_frames",
           "clock_frames", "resample_times", "timed_frames", "read_video", "no_timestamps"]
