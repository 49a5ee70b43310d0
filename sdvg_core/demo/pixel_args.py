"""Command-line pixel input shared by the demo and the evaluation: `--start-image`, `--extend`, `--input-video` with
`--strength`, their checks before any model loads (one message per problem), and the PixelInput they make.

The checks read the files only as far as needed (an image's header and pixels, a video's first frame and stream
header), against the run's size: a file that is not an image, a video that cannot be decoded, a strength outside
[0, 1] (or below what a Self-Forcing / LongLive recipe can start from), a picture the fit rule would crop by more than
half, two modes at once, a strength without an input video.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..given.read import DEFAULT_STRENGTH, PixelInputError, check_image, check_video

FLAGS = {"start_image": "--start-image", "extend": "--extend", "video_to_video": "--input-video"}
# Self-Forcing's last trained step, 250 of 1000 (engine/schedule.py SELF_FORCING_NOMINAL): the lowest strength its
# few-step recipes (self_forcing, longlive) start from
APPEND_CACHE_MIN_STRENGTH = 0.25
EXTEND_MIN_FRAMES = 9  # one block of 3 latent frames: 1 + 4 * (3 - 1) pixel frames (docs/pixels.md §4)


@dataclass(frozen=True)
class PixelRequest:
    """Pixel input named on a command line or a prompt row: the mode, the file and the strength (video-to-video)."""

    mode: str
    path: Path
    strength: float = 1.0

    def pixel_input(self):
        """The engine's PixelInput for it (reads the file's header and hashes it)."""
        from ..given.request import PixelInput

        if self.mode == "start_image":
            return PixelInput.start_image(self.path)
        if self.mode == "extend":
            return PixelInput.extend(self.path)
        return PixelInput.video_to_video(self.path, self.strength)

    def describe(self) -> str:
        s = f" strength {self.strength:g}" if self.mode == "video_to_video" else ""
        return f"{self.mode} {self.path}{s}"


def add_pixel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pixels in (docs/pixels.md; one of them)")
    g.add_argument("--start-image", metavar="PATH", help="start the video from this image (PNG, JPEG, WebP): the "
                   "output begins with it, block 0 continues it")
    g.add_argument("--extend", metavar="VIDEO", help="continue this video: the output begins with it")
    g.add_argument("--input-video", metavar="VIDEO", help="restyle this video block by block (video-to-video, read "
                   "as the run goes; the run ends where the video ends)")
    g.add_argument("--strength", type=float, default=None,
                   help=f"video-to-video denoising strength in [0, 1] (default {DEFAULT_STRENGTH}; 1 = from pure "
                        f"noise); only with --input-video")


def pixel_request(a: argparse.Namespace) -> PixelRequest | None:
    """The request the flags name (call after `pixel_problems` found none)."""
    for mode, flag in FLAGS.items():
        path = getattr(a, flag[2:].replace("-", "_"))
        if path:
            strength = (a.strength if a.strength is not None else DEFAULT_STRENGTH) if mode == "video_to_video" else 1.0
            return PixelRequest(mode, Path(path).expanduser(), strength)
    return None


def pixel_problems(a: argparse.Namespace, run_hw: tuple[int, int], recipes: tuple[str, ...]) -> list[str]:
    """Every problem with the pixel flags at the run's (height, width), for a run whose roles use `recipes`."""
    given = [flag for flag in FLAGS.values() if getattr(a, flag[2:].replace("-", "_"))]
    if len(given) > 1:
        return [f"{' and '.join(given)} given together: a run starts from one of a start image, a video to extend or "
                f"a video to restyle"]
    if a.strength is not None and not a.input_video:
        return [f"--strength {a.strength:g} given without --input-video (it is the video-to-video denoising strength)"]
    req = pixel_request(a)
    return [] if req is None else request_problems(req, FLAGS[req.mode], run_hw, recipes)


def request_problems(req: PixelRequest, where: str, run_hw: tuple[int, int], recipes: tuple[str, ...]) -> list[str]:
    """Why a pixel request cannot run at the run's size with these recipes ([] when it can)."""
    if req.mode == "video_to_video":
        if not 0.0 <= req.strength <= 1.0:  # NaN fails too
            return [f"{where}: strength {req.strength:g} must be between 0 and 1 (1 regenerates from pure noise, "
                    f"lower keeps more of the input)"]
        low = [r for r in recipes if r.split(":")[0] != "krea"]
        if low and req.strength < APPEND_CACHE_MIN_STRENGTH:
            return [f"{where}: strength {req.strength:g} is below {APPEND_CACHE_MIN_STRENGTH:g}, the last trained step "
                    f"of the few-step recipe {low[0]!r}: use at least {APPEND_CACHE_MIN_STRENGTH:g}, or --recipe krea"]
    try:
        if req.mode == "start_image":
            check_image(req.path, run_hw)
            return []
        info = check_video(req.path, run_hw)
    except PixelInputError as e:
        return [f"{where}: {e}"]
    if req.mode == "extend" and info.frames is not None and info.frames < EXTEND_MIN_FRAMES:
        return [f"{where}: the video has {info.frames} frame(s); extending needs at least {EXTEND_MIN_FRAMES} (one "
                f"block): give a longer video"]
    return []
