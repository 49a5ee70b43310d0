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

from sdvg_core.demo.pixel_args import DEFAULT_STRENGTH, PixelRequest
from sdvg_core.io.text import demo_embeddings, load_embeddings, save_embeddings

# A prompt line may name given pixels after the prompt (docs/pixels.md, "Evaluation rows"):
#   a corgi runs through a meadow || start_image=photos/corgi.png
#   waves at dusk || input_video=clips/sea.mp4 strength=0.6
#   a cat walks on || extend=clips/cat.mp4
# Paths are relative to the prompt file's folder; strength only with input_video (default 0.7).
PIXELS_SEPARATOR = " || "
ROW_MODES = {"start_image": "start_image", "extend": "extend", "input_video": "video_to_video"}


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
    """`start_image=PATH`, `extend=PATH` or `input_video=PATH [strength=S]` -> a PixelRequest (paths from `base`)."""
    where = f"line {line_no}"
    fields: dict[str, str] = {}
    for item in spec.split():
        key, eq, value = item.partition("=")
        if not eq or not value or key not in (*ROW_MODES, "strength") or key in fields:
            raise PromptRowError(f"{where}: {item!r} is not one of start_image=PATH, extend=PATH, input_video=PATH, "
                                 f"strength=S (each once; write the pixels after '{PIXELS_SEPARATOR.strip()}')")
        fields[key] = value
    modes = [k for k in ROW_MODES if k in fields]
    if len(modes) != 1:
        raise PromptRowError(f"{where}: name exactly one of start_image=, extend=, input_video= (got "
                             f"{', '.join(modes) or 'none'})")
    mode = ROW_MODES[modes[0]]
    if "strength" in fields and mode != "video_to_video":
        raise PromptRowError(f"{where}: strength= applies to input_video= only")
    strength = 1.0
    if mode == "video_to_video":
        try:
            strength = float(fields.get("strength", DEFAULT_STRENGTH))
        except ValueError:
            raise PromptRowError(f"{where}: strength={fields['strength']!r} is not a number in [0, 1]") from None
    path = Path(fields[modes[0]]).expanduser()
    return PixelRequest(mode, path if path.is_absolute() else base / path, strength)


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
