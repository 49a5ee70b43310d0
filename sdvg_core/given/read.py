"""Pixels in: a start image or an input video read from a file and fitted to the run's size as VAE input frames.

Fit rule (the same as ComfyUI's Image Scale with crop "center"): cut the centre of the picture to the run's aspect
ratio (equal margins, offsets rounded), then resize to the run's size, bicubic with antialiasing, clamped to [0, 1];
a picture of the run's size is used as is. A picture whose aspect is so far from the run's that the crop would
drop more than half of it is refused instead (a portrait photo for a landscape run), as are files that are not
images, videos that cannot be opened or decoded, and videos without frames: the `check_*` functions raise one
`PixelInputError` naming the file, what is wrong and the fix, before any model loads.

Frames come out in the VAE's range [-1, 1] ((x/255 - 0.5) / 0.5, as Krea converts them) and layout (B C T H W).
A video is read frame by frame (PyAV, ComfyUI's own video library; optional for the core: a clear error names it
when missing) and handed on in small pieces, so a minute of input is never one tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

# More than this fraction of the picture cropped away is refused (the rule: "losing more than half").
MAX_CROPPED_FRACTION = 0.5
# The default video-to-video strength (CLI, evaluation rows, PixelInput.video_to_video; the fixture's Krea runs: 0.7)
DEFAULT_STRENGTH = 0.7
# Frames per piece `read_video` yields: one encoder chunk of the Wan VAE (4 pixel frames per latent frame).
PIECE_FRAMES = 4
FIT_RULE = ("centre crop to the run's aspect ratio (as ComfyUI's Image Scale, crop=center), then bicubic resize "
            "with antialiasing to the run's size")


class PixelInputError(ValueError):
    """A start image or input video that cannot be used; the message names the file, the problem and the fix."""


# ----------------------------------------------------------------------------------------------------- fit rule
def crop_box(src_hw: tuple[int, int], run_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the centred region of a src_h x src_w picture with the run's aspect ratio.

    Equal margins on the cut sides, each rounded to the nearest pixel (Python's round, as ComfyUI's
    `common_upscale` does), so the crop is symmetric up to one pixel.
    """
    (h, w), (rh, rw) = src_hw, run_hw
    src_aspect, run_aspect = w / h, rw / rh
    if src_aspect > run_aspect:  # too wide: cut left and right
        x = round((w - w * (run_aspect / src_aspect)) / 2)
        return 0, x, h, w - 2 * x
    if src_aspect < run_aspect:  # too tall: cut top and bottom
        y = round((h - h * (src_aspect / run_aspect)) / 2)
        return y, 0, h - 2 * y, w
    return 0, 0, h, w


def cropped_fraction(src_hw: tuple[int, int], run_hw: tuple[int, int]) -> float:
    """Fraction of the picture's area the centre crop drops (0 when the aspects match)."""
    _, _, h, w = crop_box(src_hw, run_hw)
    return 1.0 - (h * w) / (src_hw[0] * src_hw[1])


def check_aspect(src_hw: tuple[int, int], run_hw: tuple[int, int], what: str) -> None:
    """Refuse a picture the fit rule would crop by more than MAX_CROPPED_FRACTION of its area."""
    lost = cropped_fraction(src_hw, run_hw)
    if lost > MAX_CROPPED_FRACTION:
        (h, w), (rh, rw) = src_hw, run_hw
        raise PixelInputError(
            f"{what} is {w}x{h}; fitting it to the run's {rw}x{rh} would crop away {lost:.0%} of it (more than "
            f"{MAX_CROPPED_FRACTION:.0%}): crop it yourself, or choose a width and height closer to its aspect ratio")


def to_vae_range(frames01: torch.Tensor) -> torch.Tensor:
    """[0, 1] -> [-1, 1] as (x - 0.5) / 0.5 (Krea's conversion; float32)."""
    return (frames01.float() - 0.5) / 0.5


def fit_frames(frames: torch.Tensor, run_hw: tuple[int, int]) -> torch.Tensor:
    """Frames [T, H, W, 3] (uint8, or float in [0, 1] as a ComfyUI IMAGE) -> [T, 3, h, w] float32 in [0, 1] at the
    run's size by the fit rule. The aspect check is the caller's (`check_aspect`): this crops whatever it gets."""
    x = frames.permute(0, 3, 1, 2)  # [T, 3, H, W]
    x = x.float() / 255 if x.dtype == torch.uint8 else x.float()
    top, left, h, w = crop_box(tuple(x.shape[-2:]), run_hw)
    x = x[:, :, top:top + h, left:left + w]
    if (h, w) != tuple(run_hw):
        x = F.interpolate(x, size=tuple(run_hw), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
    return x


def as_vae_frames(frames: torch.Tensor, run_hw: tuple[int, int]) -> torch.Tensor:
    """Frames [T, H, W, 3] (uint8 or [0, 1]) -> VAE input [1, 3, T, h, w] in [-1, 1] at the run's size."""
    return to_vae_range(fit_frames(frames, run_hw)).permute(1, 0, 2, 3).unsqueeze(0)


# ------------------------------------------------------------------------------------------------------ images
def _open_image(path: Path):
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not path.is_file():
        raise PixelInputError(f"start image {path} not found: give the path of a PNG, JPEG or WebP file")
    try:
        img = Image.open(path)
        img.load()  # decode now: a truncated or corrupt file fails here, not later
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError, ValueError) as e:
        raise PixelInputError(f"start image {path} is not an image Pillow can read ({e}): give a PNG, JPEG or WebP "
                              f"file") from None
    return ImageOps.exif_transpose(img)  # camera photos: upright as viewers show them (as ComfyUI's Load Image)


def check_image(path: str | Path, run_hw: tuple[int, int]) -> tuple[int, int]:
    """Preflight a start image: readable, and croppable to the run's size. Returns its (height, width)."""
    path = Path(path)
    img = _open_image(path)
    check_aspect((img.height, img.width), run_hw, f"start image {path}")
    return img.height, img.width


def image_size(path: str | Path) -> tuple[int, int]:
    """(height, width) of a start image as displayed (refusing a file that is not an image)."""
    img = _open_image(Path(path))
    return img.height, img.width


def read_image(path: str | Path, run_hw: tuple[int, int]) -> torch.Tensor:
    """A start image as VAE input [1, 3, H, W] in [-1, 1] at the run's size (alpha dropped: RGB, as Krea reads it)."""
    path = Path(path)
    img = _open_image(path)
    check_aspect((img.height, img.width), run_hw, f"start image {path}")
    rgb = torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.uint8).copy())  # [H, W, 3]
    return as_vae_frames(rgb[None], run_hw)[:, :, 0]


# ------------------------------------------------------------------------------------------------------ videos
@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds, from its first decoded frame and its stream header."""

    path: Path
    height: int  # as displayed (after the file's rotation)
    width: int
    fps: float | None  # the stream's average frame rate, when it declares one
    frames: int | None  # frame count from the header (None when the container does not say)


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


def _open(path: Path):
    """The file opened as a container with a video stream, or one PixelInputError saying why not."""
    av = _av()
    if not path.is_file():
        raise PixelInputError(f"input video {path} not found: give the path of an MP4, WebM, MOV or MKV file")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise PixelInputError(f"input video {path} cannot be opened as a video ({e}): give an MP4, WebM, MOV or MKV "
                              f"file") from None
    if not container.streams.video:
        container.close()
        raise PixelInputError(f"input video {path} has no video stream: give a video file")
    return container


def _frames(container, path: Path) -> Iterator[tuple[float | None, np.ndarray]]:
    """(time in seconds, uint8 [H, W, 3]) for every frame of the first video stream, decoded one at a time."""
    av = _av()
    frames = container.decode(container.streams.video[0])
    index = 0
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            return
        except (av.error.FFmpegError, OSError, ValueError) as e:
            raise PixelInputError(f"input video {path} is corrupt: frame {index} cannot be decoded ({e}); re-encode "
                                  f"or trim the file") from None
        yield frame.time, _rgb(frame)
        index += 1


def _decoded(path: Path) -> Iterator[tuple[float | None, np.ndarray]]:
    with _open(path) as container:
        yield from _frames(container, path)


def probe_video(path: str | Path) -> VideoInfo:
    """Open a video and decode its first frame (refusing a file that cannot be opened or has no frames)."""
    path = Path(path)
    with _open(path) as container:
        stream = container.streams.video[0]
        first = next(_frames(container, path), None)
        if first is None:
            raise PixelInputError(f"input video {path} has no frames that can be decoded: give a video with frames")
        rate = stream.average_rate or stream.guessed_rate
        count = stream.frames or None
    return VideoInfo(path, first[1].shape[0], first[1].shape[1], float(rate) if rate else None, count)


def check_video(path: str | Path, run_hw: tuple[int, int]) -> VideoInfo:
    """Preflight an input video: opens, decodes, and is croppable to the run's size."""
    info = probe_video(path)
    check_aspect((info.height, info.width), run_hw, f"input video {info.path}")
    return info


def count_frames(path: str | Path) -> int:
    """Frames of a video that decode (headers can be missing or wrong), decoded one at a time and dropped."""
    return sum(1 for _ in _decoded(Path(path)))


def resample_times(frames: Iterable[tuple[float | None, np.ndarray]], fps: float
                   ) -> Iterator[np.ndarray]:
    """Frames at `fps` from timed frames, streaming: output frame n (at first time + n / fps) is the input frame
    nearest in time (ties to the earlier one), so frames are dropped or repeated as ffmpeg's fps filter does."""
    step = 1.0 / fps
    prev: tuple[float, np.ndarray] | None = None
    start = n = 0
    last_gap = step
    for t, img in frames:
        if t is None:
            raise PixelInputError("the video's frames carry no timestamps: it cannot be resampled to a frame rate")
        if prev is None:
            prev, start = (t, img), t
            continue
        last_gap = t - prev[0]
        while start + n * step <= (prev[0] + t) / 2:  # nearer to prev (or halfway): prev's turn
            yield prev[1]
            n += 1
        prev = (t, img)
    if prev is not None:  # the last frame lasts as long as the gap before it: the video ends there
        while start + n * step < prev[0] + last_gap:
            yield prev[1]
            n += 1


def read_video(path: str | Path, run_hw: tuple[int, int], *, fps: float | None = None,
               max_frames: int | None = None, piece_frames: int = PIECE_FRAMES) -> Iterator[torch.Tensor]:
    """An input video as VAE input pieces [1, 3, t, H, W] in [-1, 1] at the run's size, t <= piece_frames, read and
    converted a piece at a time (feed them to `WanVAE.encode_stream`). `fps` resamples by time (`resample_times`;
    None keeps every frame of the file); `max_frames` stops reading after that many frames."""
    path = Path(path)
    if piece_frames < 1:
        raise ValueError(f"piece_frames must be at least 1, got {piece_frames}")
    if max_frames is not None and max_frames < 1:
        return
    timed = _decoded(path)
    frames = resample_times(timed, fps) if fps else (img for _, img in timed)
    batch: list[np.ndarray] = []
    done = 0
    for img in frames:
        if done == 0:
            check_aspect(img.shape[:2], run_hw, f"input video {path}")
        batch.append(img)
        done += 1
        if len(batch) == piece_frames or done == max_frames:
            yield as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw)
            batch = []
        if done == max_frames:
            return
    if batch:
        yield as_vae_frames(torch.from_numpy(np.stack(batch)), run_hw)


__all__ = ["PixelInputError", "VideoInfo", "FIT_RULE", "MAX_CROPPED_FRACTION", "crop_box", "cropped_fraction",
           "check_aspect", "fit_frames", "as_vae_frames", "to_vae_range", "check_image", "image_size", "read_image",
           "probe_video", "check_video", "count_frames", "read_video", "resample_times"]
