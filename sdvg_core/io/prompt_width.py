"""The width of prompt embeddings on both sides, known before any model loads: what a Wan DiT checkpoint takes
(its header's `text_embedding.0.weight` is [dim, text_dim]) and what a local umT5 folder makes (its config's
hidden size). The command lines compare them with each other and with embeddings files, instead of failing after
minutes of loading.

The shapes come from the one checkpoint reader (`io/tensor_file.py` `read_shapes`): a .safetensors header, or a torch
zip archive (.pt/.pth) memory-mapped without reading its tensors' bytes. Older non-zip pickles cannot be read without
loading them: the width is unknown there (the engine still checks it when the run starts).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .tensor_file import read_shapes
from .text import UMT5_CONFIG_FILE

TEXT_WEIGHT = "text_embedding.0.weight"  # Wan 2.1's first text-projection Linear: [dim, text_dim]
UMT5_WIDTH_FIELD = "d_model"  # the hidden size in a Hugging Face T5/umT5 config.json: its embeddings' width
UMT5_XXL_WIDTH = 4096  # umT5-XXL's d_model: the width Wan 2.1's text projection takes


def text_width(path: str | os.PathLike, pt_entry: str | None = None) -> int | None:
    """The prompt-embedding width a Wan DiT file expects, or None when its header does not tell (unknown format,
    no Wan text projection, an old non-zip pickle). `pt_entry`: the network of a multi-network .pt file."""
    shapes = read_shapes(path, pt_entry=pt_entry)
    return None if shapes is None else _width(shapes)


def _width(shapes: dict[str, tuple[int, ...]]) -> int | None:
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
