"""Prompt sets (one prompt per line, MovieGenVideoBench format) and the on-disk prompt-embedding cache.

Embeddings are encoded once per (encoder, prompt) and saved as .safetensors; workers and re-runs read the
file instead of running umT5 again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from sdvg_core.demo.pixel_args import PixelRequest
from sdvg_core.given.errors import PixelInputError, refuse_url
from sdvg_core.given.request import MODES, VIDEO_MODES, Extend, StartImage, VideoToVideo
from sdvg_core.io.text import demo_embeddings, load_embeddings, save_embeddings

# A prompt line may name given pixels after the prompt, with the words of the demo's flags and the nodes' inputs
# (docs/pixels.md §6):
#   a corgi runs through a meadow || start_image=photos/corgi.png
#   waves at dusk || input_video=clips/sea.mp4 strength=0.6
#   a cat walks on || input_video=clips/cat.mp4 video_mode=extend      (or: extend=clips/cat.mp4)
# Paths are relative to the prompt file's folder; strength only for video_to_video (default 0.7); keep_frames=true
# reads a video's frames as they are (default: on the run's 16 fps clock, by their timestamps).
PIXELS_SEPARATOR = " || "
PATH_KEYS = (StartImage.input, VideoToVideo.input, Extend.name)  # start_image=, input_video=, extend= (shorthand)
OPTION_KEYS = ("video_mode", "strength", "keep_frames")
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1"), ("false", "no", "0")


class PromptRowError(ValueError):
    """A prompt line whose pixel part cannot be read; the message names the line and the fix."""


@dataclass(frozen=True)
class Prompt:
    """A benchmark prompt: id k = line k+1 of the file (the benchmark's numbering), and the given pixels its line
    names (None: text-to-video)."""

    id: int
    text: str
    pixels: PixelRequest | None = None


def parse_pixels(spec: str, base: Path, line_no: int) -> PixelRequest:
    """`start_image=PATH`, `input_video=PATH [video_mode=video_to_video|extend] [strength=S] [keep_frames=true]` or
    `extend=PATH` -> a PixelRequest (paths from `base`); the strength is checked by the mode's own rule."""
    where = f"line {line_no}"
    fields: dict[str, str] = {}
    for item in spec.split():
        key, eq, value = item.partition("=")
        if not eq or not value or key not in (*PATH_KEYS, *OPTION_KEYS) or key in fields:
            raise PromptRowError(f"{where}: {item!r} is not one of start_image=PATH, input_video=PATH, extend=PATH, "
                                 f"video_mode=MODE, strength=S, keep_frames=true (each once; write the pixels after "
                                 f"'{PIXELS_SEPARATOR.strip()}')")
        fields[key] = value
    given = [k for k in PATH_KEYS if k in fields]
    if len(given) != 1:
        raise PromptRowError(f"{where}: name exactly one of start_image=, input_video=, extend= (got "
                             f"{', '.join(given) or 'none'})")
    key = given[0]
    if "video_mode" in fields and key != VideoToVideo.input:
        raise PromptRowError(f"{where}: video_mode= says what an input_video= is for")
    if fields.get("video_mode", VIDEO_MODES[0]) not in VIDEO_MODES:
        raise PromptRowError(f"{where}: video_mode={fields['video_mode']} is not one of {', '.join(VIDEO_MODES)}")
    mode = {StartImage.input: StartImage.name, Extend.name: Extend.name}.get(key) or fields.get("video_mode",
                                                                                               VIDEO_MODES[0])
    strength = None
    if "strength" in fields:
        try:
            strength = float(fields["strength"])
        except ValueError:
            raise PromptRowError(f"{where}: strength={fields['strength']!r} is not a number in [0, 1]") from None
        if not MODES[mode].takes_strength:
            raise PromptRowError(f"{where}: strength= applies to video_to_video only ({mode} runs at full strength)")
    keep = fields.get("keep_frames", "false").lower()
    if keep not in TRUE_WORDS + FALSE_WORDS or (keep in TRUE_WORDS and mode == StartImage.name):
        raise PromptRowError(f"{where}: keep_frames={fields['keep_frames']} must be true or false, for a video")
    try:
        refuse_url(fields[key], MODES[mode].what, "a file on this machine")
    except PixelInputError as e:
        raise PromptRowError(f"{where}: {e}") from None
    path = Path(fields[key]).expanduser()
    return PixelRequest(mode, path if path.is_absolute() else base / path, strength, keep in TRUE_WORDS)


def read_prompts(path: str | Path, limit: int | None = None) -> list[Prompt]:
    """Prompts of a one-per-line file; blank lines keep their number but are skipped. A line may end with
    ` || start_image=PATH` (or extend= / input_video= with strength=): PromptRowError when that part is bad."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    prompts = []
    for k, line in enumerate(lines):
        text, sep, given = line.partition(PIXELS_SEPARATOR)
        if not text.strip():
            if sep:
                raise PromptRowError(f"line {k + 1}: pixels without a prompt before '{PIXELS_SEPARATOR.strip()}'")
            continue
        pixels = parse_pixels(given, path.parent, k + 1) if sep else None
        prompts.append(Prompt(k, text.strip(), pixels))
    return prompts[:limit] if limit is not None else prompts


@dataclass(frozen=True)
class Encoder:
    """How prompts become embeddings: `key` names the encoder (part of the cache key and the run fingerprint)."""

    key: str
    encode: Callable[[str], torch.Tensor]


def demo_encoder(text_dim: int) -> Encoder:
    """The tiny models' stand-in embeddings (sdvg_core.io.text.demo_embeddings)."""
    return Encoder(f"demo-embeddings:{text_dim}", lambda text: demo_embeddings(text, text_dim))


def umt5_key(folder: str | Path, device: str = "cpu") -> str:
    """The encoder's identity: every file of its model and tokenizer folders (path, mtime, size), not the folder
    name, so replacing a file re-encodes; plus the device kind (CPU and GPU encodings differ in the last bits)."""
    from sdvg_core.io.checkpoint import file_identity
    from sdvg_core.io.text import umt5_folders

    h = hashlib.blake2b(digest_size=16)
    for d in dict.fromkeys(umt5_folders(folder)):  # model and tokenizer folder (the same one for a plain folder)
        for f in sorted(p for p in d.iterdir() if p.is_file()):
            h.update(file_identity(f).encode() + b"\n")
    return f"umt5:{h.hexdigest()}:fp32:{str(device).split(':')[0]}"


def umt5_encoder(folder: str | Path, device: str = "cpu") -> Encoder:
    """umT5 from a local folder; the model is loaded on first use and kept until the Encoder is dropped."""
    from sdvg_core.io.text import UMT5Encoder

    return Encoder(umt5_key(folder, device), UMT5Encoder(folder, device))


def cache_path(cache_dir: str | Path, encoder_key: str, text: str) -> Path:
    """The cache file of one (encoder, prompt): a content hash, so a changed prompt or encoder never collides."""
    h = hashlib.blake2b(f"{encoder_key}\n{text}".encode(), digest_size=16).hexdigest()
    return Path(cache_dir) / f"{h}.safetensors"


def cached_embeddings(cache_dir: str | Path, encoder: Encoder, prompts: list[Prompt]) -> tuple[dict[int, Path], int]:
    """Cache files for every prompt, encoding only the missing ones -> ({prompt id: file}, number encoded now)."""
    files, encoded = {}, 0
    for p in prompts:
        f = cache_path(cache_dir, encoder.key, p.text)
        if not f.is_file():
            tmp = f.with_suffix(".tmp.safetensors")
            save_embeddings(tmp, p.text, encoder.encode(p.text))
            tmp.replace(f)  # atomic: a killed run never leaves a half-written cache file
            encoded += 1
        files[p.id] = f
    return files, encoded


def load_cached(path: str | Path) -> torch.Tensor:
    """Embeddings [1, L, D] from a cache file."""
    return load_embeddings(path)[1]
