"""Command-line pixel input shared by the demo and the evaluation (docs/pixels.md §6): `--start-image PATH`, or
`--input-video VIDEO` with `--video-mode video_to_video|extend` (`--extend VIDEO` is short for the second) and
`--strength S`; `--keep-frames` reads a video's frames as they are instead of on the run's clock. The same words as
evaluation rows and the nodes' inputs (given/request.py).

The checks before any model loads are the core's own (`PixelInput.of`, `PixelInput.check_run`: the strength's range,
what each recipe can start from, an extension's frames, a crop that loses more than half, a file that is damaged or
cut short before the frames the run reads), plus what only a command line can get wrong (two inputs at once, a
strength or a video mode without a video). Each problem is one message; the files are read as far as needed (a
picture decoded once, reduced, and kept for the run; a video's header, first frame and the last second the run reads).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..engine.recipes import recipe_by_name
from ..given.errors import PixelInputError, refuse_url
from ..given.request import MODES, VIDEO_MODES, Extend, PixelInput, StartImage, VideoToVideo
from ..models.vae import VAE_PRESETS

FRAMES_PER_BLOCK = 3  # GenerationSpec's default: the command lines run 3-latent-frame blocks
WAN_VAE = "wan2.1-vae"  # the VAE both command lines run (the tiny one has its time compression: 4 frames a latent)
FLAGS = {StartImage.input: "--start-image", VideoToVideo.input: "--input-video"}  # the input words as flags
EXTEND_FLAG, MODE_FLAG = "--extend", "--video-mode"  # --extend V == --input-video V --video-mode extend


@dataclass(frozen=True)
class PixelRequest:
    """Pixel input named on a command line or a prompt row: the mode, the file, the strength (None: the mode's
    default) and whether a video's frames are kept as they are (else read on the run's 16 fps clock)."""

    mode: str
    path: Path
    strength: float | None = None
    keep_frames: bool = False

    def pixel_input(self) -> PixelInput:
        """The engine's PixelInput for it (reads the file's header and hashes it)."""
        return PixelInput.of(self.mode, self.path, self.strength, keep_frames=self.keep_frames)

    def describe(self) -> str:
        kind = MODES[self.mode]
        s = f" strength {kind.strength(self.strength):g}" if kind.takes_strength else ""
        return f"{self.mode} {self.path}{s}" + (" (frames kept as they are)" if self.keep_frames else "")


def add_pixel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pixels in (docs/pixels.md; one of them)")
    g.add_argument(FLAGS[StartImage.input], metavar="PATH", help="start the video from this image (PNG, JPEG, WebP): "
                   "the output begins with it, block 0 continues it")
    g.add_argument(FLAGS[VideoToVideo.input], metavar="VIDEO",
                   help=f"a video for the run: restyled block by block ({MODE_FLAG} video_to_video, the default; read "
                        f"as the run goes, the run ends where the video ends) or continued ({MODE_FLAG} extend)")
    g.add_argument(MODE_FLAG, choices=VIDEO_MODES, default=None,
                   help=f"what --input-video is for (default {VIDEO_MODES[0]})")
    g.add_argument(EXTEND_FLAG, metavar="VIDEO", help=f"continue this video (= --input-video VIDEO {MODE_FLAG} extend): "
                   "the output begins with it")
    g.add_argument("--strength", type=float, default=None,
                   help=f"video-to-video denoising strength in [0, 1] (default {VideoToVideo.default_strength}; 1 = "
                        f"from pure noise); only for video_to_video")
    g.add_argument("--keep-frames", action="store_true",
                   help="read the video's frames as they are; by default they are resampled by their timestamps to "
                        "the run's 16 fps, so a 30 fps or variable-frame-rate clip keeps its duration")


def _given(a: argparse.Namespace) -> list[str]:
    return [flag for flag in (*FLAGS.values(), EXTEND_FLAG) if getattr(a, flag[2:].replace("-", "_"), None)]


def pixel_request(a: argparse.Namespace) -> PixelRequest | None:
    """The request the flags name (call after `pixel_problems` found none)."""
    if a.start_image:
        return PixelRequest(StartImage.name, Path(a.start_image).expanduser())
    if a.extend or a.input_video:
        mode = Extend.name if a.extend else (a.video_mode or VIDEO_MODES[0])
        return PixelRequest(mode, Path(a.extend or a.input_video).expanduser(), a.strength, a.keep_frames)
    return None


def flag_problems(a: argparse.Namespace) -> list[str]:
    """What only a command line gets wrong: two inputs at once, a strength, a video mode or --keep-frames without a
    video."""
    given = _given(a)
    if len(given) > 1:
        return [f"{' and '.join(given)} given together: a run starts from one of a start image or a video (restyled "
                f"or continued)"]
    video = bool(a.input_video or a.extend)
    if a.strength is not None and not video:
        return [f"--strength {a.strength:g} given without --input-video (it is the video-to-video denoising strength)"]
    if a.video_mode and not a.input_video:
        return [f"{MODE_FLAG} {a.video_mode} given without --input-video (it says what that video is for)"]
    if a.keep_frames and not video:
        return ["--keep-frames given without a video (--input-video or --extend)"]
    return []


def url_problems(a: argparse.Namespace) -> list[str]:
    """A URL given as a file, said as such (as a path it would lose a slash and read as "not found")."""
    problems = []
    for flag in _given(a):
        kind = StartImage if flag == FLAGS[StartImage.input] else (Extend if flag == EXTEND_FLAG else VideoToVideo)
        try:
            refuse_url(getattr(a, flag[2:].replace("-", "_")), kind.what, "a file on this machine")
        except PixelInputError as e:
            problems.append(f"{flag}: {e}")
    return problems


@dataclass(frozen=True)
class Checked:
    """What the checks of a request found: problems (each one message), notes for the user, and the PixelInput
    they built (None when a problem stopped them), which the run can take as it is."""

    problems: list[str]
    notes: list[str]
    pixels: PixelInput | None = None


def check_request(req: PixelRequest, where: str, run_hw: tuple[int, int], recipes: tuple[str, ...],
                  blocks: int) -> Checked:
    """The core's checks of a pixel request at the run's (height, width) for `blocks` blocks whose roles use
    `recipes` (their names)."""
    try:
        pixels = req.pixel_input()
        pixels.check_run(run_hw, [recipe_by_name(r) for r in dict.fromkeys(recipes)], FRAMES_PER_BLOCK, blocks,
                         VAE_PRESETS[WAN_VAE].temporal_compression)
    except PixelInputError as e:
        return Checked([f"{where}: {e}"], [])
    return Checked([], list(getattr(pixels.source, "notes", ())), pixels)


def pixel_problems(a: argparse.Namespace, run_hw: tuple[int, int], recipes: tuple[str, ...], blocks: int) -> Checked:
    """Every problem with the pixel flags at the run's (height, width), for a run of `blocks` blocks whose roles
    use `recipes`."""
    problems = flag_problems(a) or url_problems(a)
    req = None if problems else pixel_request(a)
    if req is None:
        return Checked(problems, [])
    flag = EXTEND_FLAG if a.extend else FLAGS[MODES[req.mode].input]
    return check_request(req, flag, run_hw, recipes, blocks)
