"""Prompt embeddings for the DiTs: saved .safetensors files, a local umT5 folder, or tiny demo embeddings.

Wan conditions on umT5-XXL hidden states [1, 512, 4096]; rows past the prompt's tokens are zero (Wan's
text encoder cuts each sequence to its length and pads with zeros). One encoder pass serves both models.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Callable

import torch

from .checkpoint import CheckpointError, check_path

EMBEDDINGS_KEY = "prompt_embeds"  # tensor name in this pack's embedding files
PROMPT_META_KEY = "prompt"  # safetensors metadata field holding the prompt text
WAN_TEXT_LEN = 512  # umT5 sequence length Wan pads to (Wan2.1 configs: text_len)
UMT5_CONFIG_FILE = "config.json"  # marks a Hugging Face model folder (umT5 encoder config)
DIFFUSERS_TEXT_ENCODER = "text_encoder"  # subfolders of a Diffusers Wan pipeline folder
DIFFUSERS_TOKENIZER = "tokenizer"


def save_embeddings(path: str | os.PathLike, prompt: str, embeddings: torch.Tensor) -> Path:
    """Write [1, L, D] embeddings and the prompt text (metadata) to a .safetensors file."""
    from safetensors.torch import save_file

    p = Path(path)
    if p.suffix != ".safetensors":
        raise ValueError(f"{p}: prompt embeddings are saved as .safetensors")
    p.parent.mkdir(parents=True, exist_ok=True)
    save_file({EMBEDDINGS_KEY: embeddings.detach().to("cpu").contiguous()}, str(p), metadata={PROMPT_META_KEY: prompt})
    return p


def load_embeddings(path: str | os.PathLike) -> tuple[str, torch.Tensor]:
    """Read (prompt, embeddings [1, L, D]) from a file written by `save_embeddings` (or any file with one tensor)."""
    from safetensors import SafetensorError, safe_open

    p = check_path(path, "prompt embeddings")
    try:
        with safe_open(str(p), framework="pt", device="cpu") as f:
            keys = list(f.keys())
            key = EMBEDDINGS_KEY if EMBEDDINGS_KEY in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise CheckpointError(f"{p}: expected a '{EMBEDDINGS_KEY}' tensor, found {keys[:5]}")
            emb = f.get_tensor(key)
            prompt = (f.metadata() or {}).get(PROMPT_META_KEY, "")
    except SafetensorError as e:
        raise CheckpointError(f"{p} is not a readable .safetensors file: {e}") from e
    if emb.dim() == 2:
        emb = emb[None]
    if emb.dim() != 3:
        raise CheckpointError(f"{p}: embeddings must be [1, L, D], got {list(emb.shape)}")
    return prompt, emb.float()


def umt5_folders(folder: str | os.PathLike) -> tuple[Path, Path]:
    """(model folder, tokenizer folder) of a local umT5: one Hugging Face folder, or a Diffusers Wan pipeline root.

    A Diffusers Wan folder (e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers) keeps the encoder in `text_encoder/` and the
    tokenizer in `tokenizer/`; a plain folder (e.g. google/umt5-xxl) holds both.
    """
    f = Path(folder).expanduser()
    if not f.is_dir():
        raise CheckpointError(f"umT5 folder not found: {f} (a local copy of google/umt5-xxl, or a Diffusers Wan 2.1 "
                              f"folder with text_encoder/ and tokenizer/, holding {UMT5_CONFIG_FILE}, tokenizer files "
                              f"and weights)")
    if (f / DIFFUSERS_TEXT_ENCODER / UMT5_CONFIG_FILE).is_file():
        return f / DIFFUSERS_TEXT_ENCODER, f / DIFFUSERS_TOKENIZER
    if (f / UMT5_CONFIG_FILE).is_file():
        return f, f
    raise CheckpointError(f"umT5 folder {f} has no {UMT5_CONFIG_FILE} (nor {DIFFUSERS_TEXT_ENCODER}/{UMT5_CONFIG_FILE}); "
                          f"give the folder that holds the umT5 config, tokenizer files and weights")


class UMT5Encoder:
    """umT5 from a local folder (see `umt5_folders`), loaded on first use and kept for the following prompts.

    Calling it returns [1, text_len, hidden] float32 on the CPU with rows after the prompt's tokens set to zero,
    as Wan does. Only local files are read (local_files_only=True): no download.
    """

    def __init__(self, folder: str | os.PathLike, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, text_len: int = WAN_TEXT_LEN,
                 on_cut: Callable[[str], None] | None = None):
        self.model_dir, self.tok_dir = umt5_folders(folder)
        self.device, self.dtype, self.text_len = device, dtype, text_len
        self.on_cut = on_cut or _log_cut  # told once per prompt longer than text_len tokens (Wan cuts it there)
        self._tok = self._model = None

    def __call__(self, prompt: str) -> torch.Tensor:
        from transformers import AutoTokenizer, UMT5EncoderModel

        if self._model is None:
            self._tok = AutoTokenizer.from_pretrained(str(self.tok_dir), local_files_only=True)
            self._model = UMT5EncoderModel.from_pretrained(str(self.model_dir), local_files_only=True,
                                                           torch_dtype=self.dtype).to(self.device).eval()
        tokens = len(self._tok([prompt], add_special_tokens=True).input_ids[0])
        note = cut_note(tokens, self.text_len, f"the prompt {prompt[:40]!r}...", "tokens")
        if note:
            self.on_cut(note)
        ids = self._tok([prompt], padding="max_length", truncation=True, max_length=self.text_len, return_tensors="pt",
                        add_special_tokens=True)
        mask = ids.attention_mask.to(self.device)
        with torch.no_grad():
            hidden = self._model(input_ids=ids.input_ids.to(self.device), attention_mask=mask).last_hidden_state
        return (hidden.float() * mask[..., None]).cpu()  # [1, text_len, hidden]


def encode_umt5(folder: str | os.PathLike, prompt: str, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, text_len: int = WAN_TEXT_LEN,
                on_cut: Callable[[str], None] | None = None) -> torch.Tensor:
    """Encode one prompt with a local umT5 (loads the model for this call; use UMT5Encoder for many)."""
    return UMT5Encoder(folder, device, dtype, text_len, on_cut)(prompt)


def demo_embeddings(prompt: str, text_dim: int, text_len: int = WAN_TEXT_LEN) -> torch.Tensor:
    """Deterministic stand-in embeddings for tiny random models: one row per word, zero padding.

    Each word maps to a fixed pseudo-random vector (seeded by the word), so equal prompts give equal
    embeddings and the tiny DiTs see a prompt-dependent context, as with umT5.
    """
    words = prompt.lower().split()[: text_len - 1]
    out = torch.zeros(1, text_len, text_dim)
    for i, w in enumerate(words + ["</s>"]):
        seed = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") & ((1 << 63) - 1)
        out[0, i] = torch.randn(text_dim, generator=torch.Generator().manual_seed(seed)) * 0.5
    return out


def cut_note(rows: int, text_len: int, what: str, unit: str = "rows") -> str | None:
    """What to tell the user when Wan's text rule cuts `what` of `rows` rows (or tokens) to `text_len`; None when
    nothing is dropped."""
    if rows <= text_len:
        return None
    return (f"{what} has {rows} {unit}; Wan reads the first {text_len}, so the last {rows - text_len} {unit} are "
            f"dropped (shorten the prompt, or join prompts into one that fits)")


def _log_cut(note: str) -> None:
    logging.getLogger("SDVG").warning("SDVG: %s", note)


def fit_text_len(embeddings: torch.Tensor, text_len: int = WAN_TEXT_LEN) -> torch.Tensor:
    """[1, L, D] -> [1, text_len, D]: cut after text_len rows or pad with zero rows, as Wan's encoder does.

    ComfyUI's `wan` CLIP gives L = max(512, tokens + 1) with zeroed padding rows; Wan itself truncates at 512.
    """
    if embeddings.dim() == 2:
        embeddings = embeddings[None]
    n = embeddings.shape[1]
    if n == text_len:
        return embeddings
    if n > text_len:
        return embeddings[:, :text_len]
    pad = embeddings.new_zeros(embeddings.shape[0], text_len - n, embeddings.shape[2])
    return torch.cat([embeddings, pad], dim=1)
