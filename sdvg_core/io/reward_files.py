"""ImageReward files: strict key mapping, preset detection, vocab lookup, tokenizer; the weights are read by the
one checkpoint reader (io.checkpoint.read_state_dict).

Nothing here touches the network: configs are built in code and the tokenizer is read from a local vocab file.
The synthetic demo vocabulary lives in sdvg_core/demo/vocab.py.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

import torch

from .checkpoint import PICKLE_EXT, SAFETENSORS_EXT, file_identity, read_state_dict as read_checkpoint
from ..models.reward import (
    ImageRewardModel, ImageRewardScorer, build_model, check_base_tokenizer, empty_model, fill_model,
)
from ..models.reward_config import (
    EXTRA_SPECIAL_TOKENS, HEAD_LINEAR_INDICES, PRESETS, VOCAB_FILENAMES, VOCAB_SUBFOLDER, VOCAB_URL,
    WEIGHTS_FILENAME, WEIGHTS_REPO, WEIGHTS_URL, ImageRewardConfig, get_preset,
)
from ..models.reward_errors import (  # noqa: F401  (the error types are part of this module's interface)
    ImageRewardCheckpointError, ImageRewardError, ImageRewardFileNotFound, ImageRewardVocabError,
)
from ..models.reward_preprocess import Uint8Mode
from ..models.state_dict import CheckpointError, KeyLayout, key_list, key_mismatch, normalize_prefix

# Keys the mapping onto transformers' BLIP does not know keep this marker, so they are reported as unexpected.
_UNMAPPED = "<unmapped>"
# Prefix DataParallel/DDP put in front of keys; the package's strict=False load would silently skip such keys.
# Keys without it stay (a key present both ways is refused by normalize_prefix).
IMAGEREWARD_LAYOUT = KeyLayout(
    "ImageReward", ("blip.visual_encoder.cls_token", "blip.text_encoder.embeddings.word_embeddings.weight",
                    "mlp.layers.0.weight"), ("module.",), keep_unprefixed=True)
# A buffer (arange(512)) that transformers keeps non-persistent; the checkpoint may or may not carry it.
_POSITION_IDS_KEY = "blip.text_encoder.embeddings.position_ids"


# ---------------------------------------------------------------------------------------------------------------
# Key mapping: ImageReward.pt names <-> our module (ImageRewardModel: .blip = BlipForImageTextRetrieval, .head)
# ---------------------------------------------------------------------------------------------------------------
_VIS_SRC = "blip.visual_encoder."
_VIS_DST = "blip.vision_model."
# Whole-name renames inside the vision tower (timm ViT -> transformers BLIP vision).
_VIS_NAMES = (
    ("cls_token", "embeddings.class_embedding"),
    ("pos_embed", "embeddings.position_embedding"),
)
_VIS_PREFIXES = (
    ("patch_embed.proj.", "embeddings.patch_embedding."),
    ("norm.", "post_layernorm."),
)
_BLOCK_SRC = re.compile(r"blocks\.(\d+)\.(.+)$")
_BLOCK_DST = re.compile(r"encoder\.layers\.(\d+)\.(.+)$")
_BLOCK_PREFIXES = (
    ("norm1.", "layer_norm1."),
    ("norm2.", "layer_norm2."),
    ("attn.qkv.", "self_attn.qkv."),
    ("attn.proj.", "self_attn.projection."),
    ("mlp.fc1.", "mlp.fc1."),
    ("mlp.fc2.", "mlp.fc2."),
)
# Names kept as they are (text encoder, unused projections).
_SAME_PREFIXES = ("blip.text_encoder.", "blip.vision_proj.", "blip.text_proj.")
_HEAD_SRC = "mlp.layers."
_HEAD_DST = "head."


def _swap_prefix(name: str, table: Iterable[tuple[str, str]], reverse: bool = False) -> str | None:
    """Replace the first matching prefix of name using (src, dst) pairs, or None."""
    for src, dst in table:
        a, b = (dst, src) if reverse else (src, dst)
        if name.startswith(a):
            return b + name[len(a):]
    return None


def map_checkpoint_key(key: str) -> str | None:
    """ImageReward.pt key (already without `module.`) -> our parameter name; None when the key has no place."""
    if key.startswith(_VIS_SRC):
        rest = key[len(_VIS_SRC):]
        for src, dst in _VIS_NAMES:
            if rest == src:
                return _VIS_DST + dst
        swapped = _swap_prefix(rest, _VIS_PREFIXES)
        if swapped is not None:
            return _VIS_DST + swapped
        m = _BLOCK_SRC.match(rest)
        if m:
            inner = _swap_prefix(m.group(2), _BLOCK_PREFIXES)
            return None if inner is None else f"{_VIS_DST}encoder.layers.{m.group(1)}.{inner}"
        return None
    if key.startswith(_SAME_PREFIXES):
        return key
    if key.startswith(_HEAD_SRC):
        return _HEAD_DST + key[len(_HEAD_SRC):]
    return None


def unmap_model_key(name: str) -> str:
    """Our parameter name -> the ImageReward.pt key (inverse of map_checkpoint_key), for writing checkpoints."""
    if name.startswith(_VIS_DST):
        rest = name[len(_VIS_DST):]
        for src, dst in _VIS_NAMES:
            if rest == dst:
                return _VIS_SRC + src
        swapped = _swap_prefix(rest, _VIS_PREFIXES, reverse=True)
        if swapped is not None:
            return _VIS_SRC + swapped
        m = _BLOCK_DST.match(rest)
        if m:
            inner = _swap_prefix(m.group(2), _BLOCK_PREFIXES, reverse=True)
            if inner is not None:
                return f"{_VIS_SRC}blocks.{m.group(1)}.{inner}"
    elif name.startswith(_SAME_PREFIXES):
        return name
    elif name.startswith(_HEAD_DST):
        return _HEAD_SRC + name[len(_HEAD_DST):]
    raise KeyError(f"parameter {name!r} has no ImageReward checkpoint name")


def strip_ddp_prefix(state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """The state dict without DDP's `module.` (models.state_dict.normalize_prefix), as ImageRewardCheckpointError."""
    try:
        return normalize_prefix(state_dict, IMAGEREWARD_LAYOUT, source)[0]
    except CheckpointError as e:
        raise ImageRewardCheckpointError(str(e), source) from e


def remap_state_dict(state_dict: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Size],
                     source: str) -> dict[str, torch.Tensor]:
    """Map checkpoint keys onto our names strictly: every expected key present with its shape, nothing left over.

    Only `position_ids` may be present or absent (transformers rebuilds it); everything else must match.
    """
    sd = strip_ddp_prefix(state_dict, source)
    sd.pop(_POSITION_IDS_KEY, None)
    mapped: dict[str, torch.Tensor] = {}
    original: dict[str, str] = {}  # model name -> the file's key, for messages
    for key, value in sd.items():
        name = map_checkpoint_key(key) or f"{_UNMAPPED}{key}"
        mapped[name], original[name] = value, key
    problem = key_mismatch(expected, {k: tuple(v.shape) for k, v in mapped.items()},
                           name=lambda n: original.get(n) or unmap_model_key(n))
    if problem:
        raise ImageRewardCheckpointError(
            f"{source}: the state dict does not match the ImageReward architecture; {problem}", source)
    return mapped


# ---------------------------------------------------------------------------------------------------------------
# Preset detection from shapes
# ---------------------------------------------------------------------------------------------------------------
def _count_indices(keys: Iterable[str], pattern: re.Pattern[str]) -> int:
    """Number of distinct integer indices captured by pattern among keys."""
    return len({int(m.group(1)) for k in keys if (m := pattern.match(k))})


_VIS_BLOCK_RE = re.compile(r"blip\.visual_encoder\.blocks\.(\d+)\.")
_TEXT_LAYER_RE = re.compile(r"blip\.text_encoder\.encoder\.layer\.(\d+)\.")


def detect_config(state_dict: Mapping[str, torch.Tensor], source: str) -> ImageRewardConfig:
    """Find the preset whose sizes match the checkpoint's shapes; the vocabulary size is taken from the file."""
    sd = strip_ddp_prefix(state_dict, source)
    probe = {
        "cls": "blip.visual_encoder.cls_token",
        "pos": "blip.visual_encoder.pos_embed",
        "patch": "blip.visual_encoder.patch_embed.proj.weight",
        "fc1": "blip.visual_encoder.blocks.0.mlp.fc1.weight",
        "words": "blip.text_encoder.embeddings.word_embeddings.weight",
        "tpos": "blip.text_encoder.embeddings.position_embeddings.weight",
        "ffn": "blip.text_encoder.encoder.layer.0.intermediate.dense.weight",
        **{f"head{i}": f"{_HEAD_SRC}{i}.weight" for i in HEAD_LINEAR_INDICES},
    }
    absent = [k for k in probe.values() if k not in sd]
    if absent:
        raise ImageRewardCheckpointError(
            f"{source}: this is not an ImageReward checkpoint (no {absent[0]!r}); it holds {len(sd)} entries, "
            f"e.g. {key_list(list(sd)[:50])}. Expected the file {WEIGHTS_FILENAME} from {WEIGHTS_REPO}.", source)
    try:
        vocab, text_width = sd[probe["words"]].shape
        observed = (
            sd[probe["cls"]].shape[-1], _count_indices(sd, _VIS_BLOCK_RE), sd[probe["fc1"]].shape[0],
            text_width, _count_indices(sd, _TEXT_LAYER_RE), sd[probe["ffn"]].shape[0], sd[probe["tpos"]].shape[0],
            sd[probe["pos"]].shape[1], sd[probe["patch"]].shape[-1],
            *(sd[probe[f"head{i}"]].shape[0] for i in HEAD_LINEAR_INDICES),
        )
    except (ValueError, IndexError) as exc:
        raise ImageRewardCheckpointError(f"{source}: unexpected tensor ranks in an ImageReward checkpoint ({exc})",
                                         source) from exc
    for preset in PRESETS.values():
        if preset.architecture_key() == tuple(int(v) for v in observed):
            return preset.with_vocab(int(vocab))
    names = ("vision width", "vision blocks", "vision mlp", "text width", "text layers", "text ffn",
             "text positions", "image tokens", "patch", *(f"head{i} out" for i in HEAD_LINEAR_INDICES))
    seen = ", ".join(f"{n}={v}" for n, v in zip(names, observed))
    raise ImageRewardCheckpointError(
        f"{source}: ImageReward-like checkpoint with unknown sizes ({seen}); known presets: {sorted(PRESETS)}. "
        "Pass an explicit ImageRewardConfig if this is a deliberate variant.", source)


# ---------------------------------------------------------------------------------------------------------------
# Reading the weights file
# ---------------------------------------------------------------------------------------------------------------
def _folder_listing(folder: Path, suffixes: tuple[str, ...]) -> str:
    """Short listing of candidate files in folder, for 'not found' messages."""
    if not folder.is_dir():
        return f"the folder {folder} does not exist"
    found = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in suffixes)
    return f"files there with {'/'.join(suffixes)}: {found[:10] if found else 'none'}"


_WEIGHT_SUFFIXES = PICKLE_EXT + SAFETENSORS_EXT
# Appended to "download it again" messages of the reader.
_DOWNLOAD_HINT = f" (the published {WEIGHTS_FILENAME}, about 1.79 GB, is at {WEIGHTS_URL})"


def check_weights_path(path: str | os.PathLike) -> Path:
    """Resolve the weights path or raise an error naming it, the folder searched and where to download it."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ImageRewardCheckpointError(
            f"{p} is a folder; pass the weights file itself (usually {p / WEIGHTS_FILENAME}). "
            f"{_folder_listing(p, _WEIGHT_SUFFIXES)}.", p)
    if not p.is_file():
        raise ImageRewardFileNotFound(
            f"ImageReward weights not found: {p} (searched folder {p.parent}; "
            f"{_folder_listing(p.parent, _WEIGHT_SUFFIXES)}). "
            f"Download {WEIGHTS_FILENAME} (1.79 GB) from {WEIGHTS_REPO} ({WEIGHTS_URL}) "
            "and put it in ComfyUI's models/image_reward/ folder.", p)
    return p


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """ImageReward tensors from .safetensors or a torch pickle (weights_only), through the one checkpoint reader."""
    p = check_weights_path(path)
    sd, _ = read_checkpoint(p, pt_entry=None, what="ImageReward weights", hint=_DOWNLOAD_HINT,
                            error=ImageRewardCheckpointError)
    return sd


# ---------------------------------------------------------------------------------------------------------------
# Vocabulary and tokenizer
# ---------------------------------------------------------------------------------------------------------------
def vocab_candidates(weights_path: str | Path | None, vocab_path: str | Path | None) -> list[Path]:
    """Where the vocab is looked for: the explicit path (or inside it, if a folder), else next to the weights."""
    if vocab_path is not None:
        v = Path(vocab_path).expanduser()
        return [v / n for n in VOCAB_FILENAMES] if v.is_dir() else [v]
    if weights_path is None:
        raise ValueError("give vocab_path, or weights_path so the vocabulary can be looked up next to it")
    folder = Path(weights_path).expanduser().parent
    return [folder / n for n in VOCAB_FILENAMES] + [folder / VOCAB_SUBFOLDER / n for n in VOCAB_FILENAMES]


def find_vocab(weights_path: str | Path | None = None, vocab_path: str | Path | None = None) -> Path:
    """First existing vocabulary candidate, or an error naming every file searched and the download URL."""
    candidates = vocab_candidates(weights_path, vocab_path)
    for c in candidates:
        if c.is_file():
            return c
    where = ", ".join(str(c) for c in candidates)
    raise ImageRewardFileNotFound(
        f"BERT vocabulary not found; searched: {where}. Download bert-base-uncased vocab.txt (30522 lines, 232 KB) "
        f"from {VOCAB_URL} and save it next to {WEIGHTS_FILENAME} as vocab.txt "
        f"(or in a {VOCAB_SUBFOLDER}/ folder there).")


def read_vocab_bytes(path: Path) -> bytes:
    """Vocabulary bytes with a UTF-8 BOM and Windows line ends removed (both would corrupt tokens silently)."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.replace(b"\r\n", b"\n")


def count_vocab_lines(data: bytes) -> int:
    """Number of entries in a vocab.txt (one token per line, final newline optional)."""
    lines = data.split(b"\n")
    return len(lines) - 1 if lines and lines[-1] == b"" else len(lines)


def load_tokenizer(vocab_file: str | Path, config: ImageRewardConfig):
    """ImageReward's tokenizer: bert-base-uncased WordPiece from a local vocab.txt plus [DEC] (bos) and [ENC].

    The vocab is copied into a private temporary folder as vocab.txt and loaded with from_pretrained on that folder
    (local files only), which builds the full vocabulary on transformers 4.50 (Python tokenizer) and 5.x (Rust);
    the size is checked against the model's table before and after adding the two special tokens.
    """
    from transformers import BertTokenizer

    path = Path(vocab_file)
    data = read_vocab_bytes(path)
    n_lines = count_vocab_lines(data)
    if n_lines != config.base_vocab_tokens:
        raise ImageRewardVocabError(
            f"{path} has {n_lines} entries but the model ({config.name}, word table {config.vocab_size}) needs "
            f"{config.base_vocab_tokens} plus {'/'.join(EXTRA_SPECIAL_TOKENS)}. For ImageReward-v1.0 use the "
            f"bert-base-uncased vocab.txt ({VOCAB_URL}).", path)
    with tempfile.TemporaryDirectory(prefix="sdvg_vocab_") as tmp:
        (Path(tmp) / "vocab.txt").write_bytes(data)
        tok = BertTokenizer.from_pretrained(tmp, local_files_only=True, do_lower_case=True,
                                            tokenize_chinese_chars=True, strip_accents=None)
    check_base_tokenizer(tok, config.base_vocab_tokens, str(path))
    dec, enc = EXTRA_SPECIAL_TOKENS
    tok.add_special_tokens({"bos_token": dec})
    try:
        tok.add_special_tokens({"additional_special_tokens": [enc]})
    except (ValueError, TypeError, KeyError):  # a transformers release without that key: plain special token
        tok.add_tokens([enc], special_tokens=True)
    ids = tuple(tok.convert_tokens_to_ids([dec, enc]))
    if ids != (config.dec_token_id, config.enc_token_id) or len(tok) != config.vocab_size:
        raise ImageRewardVocabError(
            f"{path}: after adding {dec}/{enc} the tokenizer has {len(tok)} tokens and ids {ids}; "
            f"expected {config.vocab_size} and {(config.dec_token_id, config.enc_token_id)}.", path)
    return tok


# ---------------------------------------------------------------------------------------------------------------
# Model and scorer from files
# ---------------------------------------------------------------------------------------------------------------
def load_model(weights: str | Path | Mapping[str, torch.Tensor], cfg: ImageRewardConfig | None = None,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
               source: str | None = None) -> ImageRewardModel:
    """Model from an ImageReward state dict or file (.pt weights_only / .safetensors), keys mapped strictly."""
    if isinstance(weights, Mapping):
        state_dict, src = dict(weights), source or "<state dict>"
    else:
        state_dict, src = read_state_dict(weights), source or str(weights)
    cfg = cfg or detect_config(state_dict, src)
    model = empty_model(cfg)
    mapped = remap_state_dict(state_dict, {k: v.shape for k, v in model.state_dict().items()}, src)
    return fill_model(model, mapped, device=device, dtype=dtype)


def export_state_dict(model: ImageRewardModel) -> dict[str, torch.Tensor]:
    """Our model's weights under ImageReward.pt names (plus position_ids), e.g. to write a demo checkpoint."""
    out = {unmap_model_key(k): v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    out[_POSITION_IDS_KEY] = torch.arange(model.cfg.max_positions).unsqueeze(0)
    return out


def load_scorer(weights_path: str | Path, vocab_path: str | Path | None = None, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32, micro_batch: int = 16, config: ImageRewardConfig | str | None = None,
                uint8_mode: Uint8Mode = "truncate") -> ImageRewardScorer:
    """Load ImageReward.pt / .safetensors and the BERT vocab (explicit path, else next to the weights).

    `config`: an ImageRewardConfig, a preset name, or None to detect it from the shapes. Sets `key` to the
    identity of both files and the dtype (what the scores depend on; micro_batch does not change them).
    """
    cfg = get_preset(config) if isinstance(config, str) else config
    check_weights_path(weights_path)  # the weights error first: it is the bigger download
    vocab = find_vocab(weights_path, vocab_path)  # then the vocab, before reading 1.8 GB
    model = load_model(weights_path, cfg, device=device, dtype=dtype)
    scorer = ImageRewardScorer(model, load_tokenizer(vocab, model.cfg), micro_batch=micro_batch, uint8_mode=uint8_mode)
    scorer.key = f"{file_identity(weights_path)}|{file_identity(vocab)}|{str(dtype).replace('torch.', '')}"
    return scorer


def random_scorer(cfg: ImageRewardConfig, vocab_path: str | Path, seed: int = 0, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32, micro_batch: int = 16,
                  uint8_mode: Uint8Mode = "truncate") -> ImageRewardScorer:
    """Random-weight scorer (demo / benchmark); cfg.vocab_size must fit the vocab file (+2)."""
    model = build_model(cfg, seed=seed, device=device, dtype=dtype)
    scorer = ImageRewardScorer(model, load_tokenizer(vocab_path, cfg), micro_batch=micro_batch, uint8_mode=uint8_mode)
    scorer.key = (f"random:{cfg.name}:{cfg.vocab_size}:seed{seed}|{file_identity(vocab_path)}|"
                  f"{str(dtype).replace('torch.', '')}")
    return scorer
