"""The width of prompt embeddings on both sides, known before any model loads: what a Wan DiT checkpoint takes
(its header's `text_embedding.0.weight` is [dim, text_dim]) and what a local umT5 folder makes (its config's
hidden size). The command lines compare them with each other and with embeddings files, instead of failing after
minutes of loading.

.safetensors: the JSON header at the start of the file (its first 8 bytes give its length). Torch zip archives
(.pt/.pth): `torch.load(mmap=True, weights_only=True)` maps the file and builds the tensors without reading their
bytes. Older non-zip pickles cannot be read without loading them: the width is unknown there (the engine still
checks it when the run starts).
"""
from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import torch

from .checkpoint import PICKLE_EXT, SAFETENSORS_EXT, SELF_FORCING_ENTRIES, WRAPPER_ENTRIES
from .text import UMT5_CONFIG_FILE

TEXT_WEIGHT = "text_embedding.0.weight"  # Wan 2.1's first text-projection Linear: [dim, text_dim]
HEADER_LENGTH_BYTES = 8  # safetensors: a little-endian u64 header length, then the JSON header
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on the header size (its format specification)
UMT5_WIDTH_FIELD = "d_model"  # the hidden size in a Hugging Face T5/umT5 config.json: its embeddings' width
UMT5_XXL_WIDTH = 4096  # umT5-XXL's d_model: the width Wan 2.1's text projection takes


def text_width(path: str | os.PathLike, pt_entry: str | None = None) -> int | None:
    """The prompt-embedding width a Wan DiT file expects, or None when its header does not tell (unknown format,
    no Wan text projection, an old non-zip pickle). `pt_entry`: the network of a multi-network .pt file."""
    p = Path(path).expanduser()
    try:
        if p.suffix.lower() in SAFETENSORS_EXT:
            return _safetensors_text_width(p)
        if p.suffix.lower() in PICKLE_EXT and zipfile.is_zipfile(p):
            return _zip_text_width(p, pt_entry)
    except (OSError, ValueError, RuntimeError, KeyError, EOFError, struct.error, json.JSONDecodeError):
        return None  # unreadable: the loader names the problem when it reads the file
    return None


def _safetensors_text_width(p: Path) -> int | None:
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(HEADER_LENGTH_BYTES))
        if n > MAX_HEADER_BYTES:
            return None
        header = json.loads(f.read(n))
    return _width({k: v.get("shape") for k, v in header.items() if isinstance(v, dict)})


def _zip_text_width(p: Path, pt_entry: str | None) -> int | None:
    obj = torch.load(str(p), map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(obj, dict):
        return None
    nets = [e for e in ((pt_entry,) if pt_entry else SELF_FORCING_ENTRIES) if isinstance(obj.get(e), dict)]
    nets += [w for w in WRAPPER_ENTRIES if not nets and isinstance(obj.get(w), dict)]
    sd = obj[nets[0]] if nets else obj
    return _width({k: list(v.shape) for k, v in sd.items() if isinstance(v, torch.Tensor)})


def _width(shapes: dict[str, list[int] | None]) -> int | None:
    """text_dim from the first `...text_embedding.0.weight` of any key prefix (model., diffusion_model., ...)."""
    for key, shape in shapes.items():
        if (key == TEXT_WEIGHT or key.endswith("." + TEXT_WEIGHT)) and shape and len(shape) == 2:
            return int(shape[1])
    return None


def umt5_width(model_folder: str | os.PathLike) -> int | None:
    """The width of the embeddings a local umT5 model folder makes (its config.json's d_model), None if not stated."""
    try:
        cfg = json.loads((Path(model_folder) / UMT5_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    width = cfg.get(UMT5_WIDTH_FIELD) if isinstance(cfg, dict) else None
    return width if isinstance(width, int) else None


def width_problems(inputs: dict[str, int], models: dict[str, int]) -> list[str]:
    """Each source of prompt embeddings (name -> width) whose width is not what a model (name -> width) takes."""
    return [f"{src}: prompt embeddings {w} wide, but {model} takes {need}-wide ones (umT5-XXL makes "
            f"{UMT5_XXL_WIDTH}); encode the prompt for this model, e.g. with python -m sdvg_core.io.encode_prompt"
            for src, w in inputs.items() for model, need in models.items() if w != need]
