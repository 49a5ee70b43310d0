"""Given pixels a run starts from, as a caller asks for them: the mode, the denoising strength and the frames.

The modes are types that carry their own rules and words (`StartImage`, `Extend`, `VideoToVideo`): the same words on
the command line, in evaluation rows and on the nodes (docs/pixels.md §6): `start_image` names a picture, `input_video`
a video, `video_mode` what the video is for (`video_to_video`, the default, or `extend`), `strength` the denoising
strength of video-to-video. Each rule is stated here once and asked for by the command lines' checks, the nodes and
the engine: the strength's range and default, the strength a recipe can start from (its own step plan says), the
frames an extension needs (each recipe's encoding says), the frames a run reads.

`PixelInput` is what a caller hands `GenerationSpec(pixels=...)`: the mode, the strength, a streaming frame source
(given/sources.py) and a digest naming the frames (the memo's root lineage holds it, so a change of image reuses
nothing). Each constructor validates at once and raises one `PixelInputError` (a ValueError) saying what is wrong and
the fix; fitting to the run's size happens when the run starts, where the size is known.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Protocol

from ..sampling.timesteps import check_strength
from .errors import PixelInputError
from .sources import FrameSource, ImageLike, image_source, video_source



class Recipe(Protocol):
    """What the rules ask of a context recipe (engine/recipes): its name, its plan at a strength (ValueError where it
    has none) and how it encodes given pixels."""

    name: str
    given_encoding: Any

    def strength_plan(self, strength: float) -> Any: ...

FULL_STRENGTH = 1.0  # a start image or an extension: the blocks are generated from pure noise


class PixelMode:
    """A kind of given pixels and its rules (class-level: the modes are the three subclasses)."""

    name: ClassVar[str]  # the mode's word: the report's `mode`, the nodes' `video_mode`
    input: ClassVar[str]  # the word naming its pixels: start_image | input_video
    what: ClassVar[str]  # a noun for messages
    streamed: ClassVar[bool] = False  # read block by block as the run goes (its end ends the run)
    takes_strength: ClassVar[bool] = False
    default_strength: ClassVar[float] = FULL_STRENGTH

    @classmethod
    def strength(cls, value: float | None = None) -> float:
        """The run's strength for `value` (None: the mode's default); PixelInputError when the mode cannot take it."""
        if value is None:
            return cls.default_strength
        if not cls.takes_strength:
            if value != FULL_STRENGTH:
                raise PixelInputError(f"a strength applies to video_to_video only; {cls.name} runs at full strength "
                                      f"({FULL_STRENGTH:g})")
            return FULL_STRENGTH
        try:
            return check_strength(value)
        except (TypeError, ValueError) as e:
            raise PixelInputError(str(e)) from None

    @classmethod
    def source(cls, value: ImageLike, fps: float | None = None, keep_frames: bool = False) -> FrameSource:
        """The frames of `value` (a file path, or IMAGE frames [T, H, W, 3] in [0, 1])."""
        return video_source(value, cls.what, fps, keep_frames)

    @classmethod
    def recipe_problem(cls, strength: float, recipe: Recipe) -> str | None:
        """Why `recipe` cannot run this mode at `strength` (None: it can). The recipe's own plan answers."""
        if not cls.takes_strength:
            return None
        try:
            recipe.strength_plan(strength)
        except ValueError as e:
            return f"recipe {recipe.name!r}: {e}"
        return None

    @classmethod
    def min_frames(cls, encodings: Iterable, frames_per_block: int, temporal_compression: int) -> int:
        """Fewest frames (on the run's clock) a run of this mode can start from."""
        return 1

    @classmethod
    def frames_read(cls, num_blocks: int, frames_per_block: int, temporal_compression: int) -> int | None:
        """Frames a run of `num_blocks` reads from the input (None: all of them)."""
        return 1


class StartImage(PixelMode):
    """Image-to-video: the video begins with the picture (a start frame the first block continues)."""

    name, input, what = "start_image", "start_image", "start image"

    @classmethod
    def source(cls, value, fps=None, keep_frames=False):
        return image_source(value)


class Extend(PixelMode):
    """Continue a video: the output begins with it."""

    name, input, what = "extend", "input_video", "video to extend"

    @classmethod
    def min_frames(cls, encodings, frames_per_block, temporal_compression):
        """As many as the most demanding role's encoding needs (Krea: its context; Self-Forcing: one whole block)."""
        return max(e.min_extension_frames(frames_per_block, temporal_compression) for e in encodings)

    @classmethod
    def frames_read(cls, num_blocks, frames_per_block, temporal_compression):
        return None


class VideoToVideo(PixelMode):
    """Restyle a video block by block: each input block noised at the strength and denoised under the prompt."""

    name, input, what = "video_to_video", "input_video", "input video"
    streamed, takes_strength = True, True
    default_strength = 0.7  # CLI, evaluation rows, nodes, the API (the fixture's Krea runs: 0.7)

    @classmethod
    def min_frames(cls, encodings, frames_per_block, temporal_compression):
        return block_frames(0, frames_per_block, temporal_compression)

    @classmethod
    def frames_read(cls, num_blocks, frames_per_block, temporal_compression):
        return frames_before(num_blocks, frames_per_block, temporal_compression)


def block_frames(b: int, frames_per_block: int, temporal_compression: int) -> int:
    """Input pixel frames block b of a video-to-video run encodes: 1 + tc (F - 1) for block 0 (the first latent is a
    lone frame), tc F after (Krea's streamed encode: 9, then 12)."""
    return 1 + temporal_compression * (frames_per_block - 1) if b == 0 else temporal_compression * frames_per_block


def frames_before(b: int, frames_per_block: int, temporal_compression: int) -> int:
    """Input pixel frames blocks 0 .. b-1 of a video-to-video run read (where block b starts)."""
    if b == 0:
        return 0
    return block_frames(0, frames_per_block, temporal_compression) + \
        block_frames(1, frames_per_block, temporal_compression) * (b - 1)


MODES: dict[str, type[PixelMode]] = {m.name: m for m in (StartImage, Extend, VideoToVideo)}
PIXEL_MODES = tuple(MODES)  # ("start_image", "extend", "video_to_video")
VIDEO_MODES = tuple(m.name for m in (VideoToVideo, Extend))  # what an input_video is for (video_mode), default first
DEFAULT_STRENGTH = VideoToVideo.default_strength


def mode_of(name: str, where: str = "pixel input mode") -> type[PixelMode]:
    """The mode a word names; PixelInputError listing the words otherwise."""
    if name not in MODES:
        raise PixelInputError(f"{where} {name!r} is not one of {PIXEL_MODES}")
    return MODES[name]


@dataclass(frozen=True)
class PixelInput:
    """Given pixels for a run (docs/pixels.md): `mode` in PIXEL_MODES, `strength` (1.0 unless video_to_video),
    `source` (streaming frames) and `digest` (their identity, for memo lineage). Build with `start_image`, `extend`,
    `video_to_video` or `of(mode, ...)`."""

    mode: str
    source: FrameSource = field(repr=False, compare=False)
    strength: float = FULL_STRENGTH
    digest: str = ""

    def __post_init__(self):
        object.__setattr__(self, "strength", mode_of(self.mode).strength(self.strength))
        if not self.digest:
            object.__setattr__(self, "digest", self.source.digest)

    @property
    def kind(self) -> type[PixelMode]:
        """The mode as a type (its rules and words)."""
        return MODES[self.mode]

    @classmethod
    def of(cls, mode: str, value: ImageLike, strength: float | None = None, fps: float | None = None,
           keep_frames: bool = False) -> "PixelInput":
        """The one constructor the command lines and the nodes use: `value` read as `mode` says, at `strength`
        (None: the mode's default), a video's frames on the run's clock (`fps`: the rate of IMAGE frames;
        `keep_frames`: every frame as it is)."""
        kind = mode_of(mode)
        return cls(kind.name, kind.source(value, fps, keep_frames), kind.strength(strength))

    @classmethod
    def start_image(cls, image: ImageLike) -> "PixelInput":
        """Image-to-video: the video begins with `image` (a file path, or frames [T, H, W, 3] in [0, 1]: frame 0)."""
        return cls.of(StartImage.name, image)

    @classmethod
    def extend(cls, video: ImageLike, fps: float | None = None, keep_frames: bool = False) -> "PixelInput":
        """Continue `video` (a file path, or frames [T, H, W, 3] in [0, 1]); the output begins with it."""
        return cls.of(Extend.name, video, fps=fps, keep_frames=keep_frames)

    @classmethod
    def video_to_video(cls, video: ImageLike, strength: float = DEFAULT_STRENGTH, fps: float | None = None,
                       keep_frames: bool = False) -> "PixelInput":
        """Restyle `video` block by block, each input block noised at `strength` in [0, 1] (1 = from pure noise)."""
        return cls.of(VideoToVideo.name, video, strength, fps, keep_frames)

    def identity(self) -> str:
        """What the memo's root lineage holds: mode, strength and the given pixels' digest."""
        return f"{self.mode}|s{self.strength!r}|{self.digest}"

    def check_fit(self, run_hw: tuple[int, int]) -> None:
        """Refuse (PixelInputError) pixels the fit rule would crop by more than half at the run's size."""
        from .fit import check_aspect

        check_aspect(self.source.source_hw(), run_hw, self.source.name)

    def check_run(self, run_hw: tuple[int, int], recipes: Iterable[Recipe], frames_per_block: int,
                  num_blocks: int, temporal_compression: int) -> None:
        """Refuse (PixelInputError), before any model call, what a run with these recipes cannot start from: a crop
        that loses more than half, a strength a recipe has no plan for, an input too short to start from (its first
        frames decoded and counted on the run's clock), a file that is cut short before the frames the run reads
        (its header's end looked for, where the header says how long it is)."""
        self.check_fit(run_hw)
        recipes = tuple(recipes)
        for recipe in recipes:
            problem = self.kind.recipe_problem(self.strength, recipe)
            if problem:
                raise PixelInputError(problem)
        need = self.kind.min_frames([r.given_encoding for r in recipes], frames_per_block, temporal_compression)
        count = getattr(self.source, "count_up_to", None)  # a FrameSource of a caller's own may not count
        have = count(need) if count is not None else None  # decoded, not a header's word (missing or wrong)
        if have is not None and have < need:
            raise PixelInputError(f"{self.source.name} has {have} frame(s); {self.mode} needs at least {need} (one "
                                  f"block of {frames_per_block} latent frames): give a longer video")
        check = getattr(self.source, "check_readable", None)
        if check is not None:
            check(run_hw, self.kind.frames_read(num_blocks, frames_per_block, temporal_compression))

    def report(self, given_frames: int) -> dict:
        """The report's `pixels` entry: the mode, the strength, the frames the run used (on the run's clock), the
        digest, and the input's own frame rate and the rate it was read at (None: kept as it is)."""
        timing = getattr(self.source, "timing", lambda: {"source_fps": None, "frame_rate": None})()
        return {"mode": self.mode, "strength": self.strength, "given_frames": given_frames, "digest": self.digest,
                **timing}


def describe(pixels: PixelInput, given_frames: int | None = None) -> str:
    """One line for a person: the mode, the strength where it acts, the frames used and the clock they were read
    on (the demo's summary, SDVG Start's text, the report table)."""
    r = pixels.report(given_frames or 0)
    text = f"{pixels.mode}" + (f" strength {pixels.strength:g}" if pixels.kind.takes_strength else "")
    if given_frames is not None:
        text += f", {given_frames} given frame(s)"
    return text + timing_words(r)


def timing_words(r: dict) -> str:
    """', input 30 fps resampled to 16 fps' (or 'kept as they are') for a report's pixels entry with a video."""
    if r.get("source_fps") is None and r.get("frame_rate") is None:
        return ""
    src = f"{r['source_fps']:g} fps" if r.get("source_fps") else "of unknown rate"
    if r.get("frame_rate"):
        return f" (input {src}, resampled to {r['frame_rate']:g} fps by time)"
    return f" (input {src}, frames kept as they are)"


__all__ = ["PIXEL_MODES", "VIDEO_MODES", "DEFAULT_STRENGTH", "FULL_STRENGTH", "PixelMode", "StartImage", "Extend",
           "VideoToVideo", "MODES", "mode_of", "block_frames", "frames_before", "PixelInput", "PixelInputError", "describe"]
