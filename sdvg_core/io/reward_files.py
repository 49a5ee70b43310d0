"""ImageReward files: checkpoint reading (weights_only), strict key mapping, preset detection, vocab lookup, tokenizer.

Nothing here touches the network: configs are built in code and the tokenizer is read from a local vocab file.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

import torch

from .keycheck import key_list, key_mismatch
from ..models.reward_config import (
    EXTRA_SPECIAL_TOKENS, HEAD_LINEAR_INDICES, PRESETS, TINY, VOCAB_FILENAMES, VOCAB_SUBFOLDER, VOCAB_URL,
    WEIGHTS_FILENAME, WEIGHTS_REPO, WEIGHTS_URL, ImageRewardConfig,
)

# Keys the mapping onto transformers' BLIP does not know keep this marker, so they are reported as unexpected.
_UNMAPPED = "<unmapped>"
_SAFETENSORS_SUFFIXES = (".safetensors", ".sft")
# Prefix DataParallel/DDP put in front of every key; the package's strict=False load would silently skip such keys.
_DDP_PREFIX = "module."
# A buffer (arange(512)) that transformers keeps non-persistent; the checkpoint may or may not carry it.
_POSITION_IDS_KEY = "blip.text_encoder.embeddings.position_ids"


class ImageRewardError(RuntimeError):
    """Any problem with the ImageReward files; the message names the file and what to do."""


class ImageRewardFileNotFound(ImageRewardError, FileNotFoundError):
    """A weights or vocabulary file is missing; the message lists where it was looked for and where to get it."""


class ImageRewardCheckpointError(ImageRewardError):
    """The weights file exists but cannot be used (corrupt, unsafe pickle, wrong architecture, key mismatch)."""


class ImageRewardVocabError(ImageRewardError):
    """The vocabulary or the tokenizer built from it does not fit the model."""


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
    """Remove a leading `module.` from every key that has one; refuse if that makes two keys collide."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        name = key[len(_DDP_PREFIX):] if key.startswith(_DDP_PREFIX) else key
        if name in out:
            raise ImageRewardCheckpointError(f"{source}: key {name!r} appears both with and without 'module.'")
        out[name] = value
    return out


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
            f"{source}: the state dict does not match the ImageReward architecture; {problem}")
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
            f"e.g. {key_list(list(sd)[:50])}. Expected the file {WEIGHTS_FILENAME} from {WEIGHTS_REPO}.")
    try:
        vocab, text_width = sd[probe["words"]].shape
        observed = (
            sd[probe["cls"]].shape[-1], _count_indices(sd, _VIS_BLOCK_RE), sd[probe["fc1"]].shape[0],
            text_width, _count_indices(sd, _TEXT_LAYER_RE), sd[probe["ffn"]].shape[0], sd[probe["tpos"]].shape[0],
            sd[probe["pos"]].shape[1], sd[probe["patch"]].shape[-1],
            *(sd[probe[f"head{i}"]].shape[0] for i in HEAD_LINEAR_INDICES),
        )
    except (ValueError, IndexError) as exc:
        raise ImageRewardCheckpointError(f"{source}: unexpected tensor ranks in an ImageReward checkpoint ({exc})")
    for preset in PRESETS.values():
        if preset.architecture_key() == tuple(int(v) for v in observed):
            return preset.with_vocab(int(vocab))
    names = ("vision width", "vision blocks", "vision mlp", "text width", "text layers", "text ffn",
             "text positions", "image tokens", "patch", *(f"head{i} out" for i in HEAD_LINEAR_INDICES))
    seen = ", ".join(f"{n}={v}" for n, v in zip(names, observed))
    raise ImageRewardCheckpointError(
        f"{source}: ImageReward-like checkpoint with unknown sizes ({seen}); known presets: {sorted(PRESETS)}. "
        "Pass an explicit ImageRewardConfig if this is a deliberate variant.")


# ---------------------------------------------------------------------------------------------------------------
# Reading the weights file
# ---------------------------------------------------------------------------------------------------------------
def _folder_listing(folder: Path, suffixes: tuple[str, ...]) -> str:
    """Short listing of candidate files in folder, for 'not found' messages."""
    if not folder.is_dir():
        return f"the folder {folder} does not exist"
    found = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in suffixes)
    return f"files there with {'/'.join(suffixes)}: {found[:10] if found else 'none'}"


def check_weights_path(path: str | Path) -> Path:
    """Resolve the weights path or raise an error naming it, the folder searched and where to download it."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ImageRewardCheckpointError(
            f"{p} is a folder; pass the weights file itself (usually {p / WEIGHTS_FILENAME}). "
            f"{_folder_listing(p, ('.pt', '.pth', '.bin') + _SAFETENSORS_SUFFIXES)}.")
    if not p.is_file():
        raise ImageRewardFileNotFound(
            f"ImageReward weights not found: {p} (searched folder {p.parent}; "
            f"{_folder_listing(p.parent, ('.pt', '.pth', '.bin') + _SAFETENSORS_SUFFIXES)}). "
            f"Download {WEIGHTS_FILENAME} (1.79 GB) from {WEIGHTS_REPO} ({WEIGHTS_URL}) "
            "and put it in ComfyUI's models/image_reward/ folder.")
    return p


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a flat {name: tensor} dict from .safetensors, or from a torch pickle with weights_only=True only."""
    p = check_weights_path(path)
    size = p.stat().st_size
    if p.suffix.lower() in _SAFETENSORS_SUFFIXES:
        from safetensors.torch import load_file
        try:
            obj = load_file(str(p), device="cpu")
        except Exception as exc:  # SafetensorError, OSError: header or body cut short, not safetensors at all
            raise ImageRewardCheckpointError(
                f"{p} ({size:,} bytes) cannot be read as safetensors, it is truncated or not a safetensors file: "
                f"{exc}. Re-download it ({WEIGHTS_REPO}).") from exc
    else:
        try:
            obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as exc:
            text = str(exc)
            if "Weights only load failed" in text or "Unsupported global" in text or "unsupported GLOBAL" in text:
                reason = next((ln.strip() for ln in text.splitlines() if "GLOBAL" in ln or "global" in ln), "")
                raise ImageRewardCheckpointError(
                    f"{p}: refused to load: the pickle contains objects other than tensors, and unpickling them "
                    f"would run code ({reason}). Only plain state dicts are accepted (torch.load weights_only=True); "
                    f"the file is not the published {WEIGHTS_FILENAME} ({WEIGHTS_REPO}).") from exc
            raise ImageRewardCheckpointError(
                f"{p} ({size:,} bytes) cannot be read as a torch checkpoint, it is truncated or corrupt "
                f"({type(exc).__name__}: {text.splitlines()[0] if text else 'no detail'}). The published "
                f"{WEIGHTS_FILENAME} is about 1.79 GB; re-download it from {WEIGHTS_URL}.") from exc
    if not isinstance(obj, Mapping) or not obj:
        raise ImageRewardCheckpointError(
            f"{p}: expected a flat dict of tensors (a state dict), got {type(obj).__name__}"
            + (" (empty)" if isinstance(obj, Mapping) else ""))
    bad = [str(k) for k, v in obj.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))]
    if bad:
        raise ImageRewardCheckpointError(
            f"{p}: expected a flat dict of tensors, but {key_list(bad)} entries are not tensors "
            "(a wrapped training checkpoint?); save model.state_dict() instead.")
    return dict(obj)


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


def _read_vocab_bytes(path: Path) -> bytes:
    """Vocabulary bytes with a UTF-8 BOM and Windows line ends removed (both would corrupt tokens silently)."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.replace(b"\r\n", b"\n")


def count_vocab_lines(data: bytes) -> int:
    """Number of entries in a vocab.txt (one token per line, final newline optional)."""
    lines = data.split(b"\n")
    return len(lines) - 1 if lines and lines[-1] == b"" else len(lines)


def check_base_tokenizer(tokenizer, expected: int, source: str) -> None:
    """Fail loudly unless the tokenizer holds exactly the expected WordPiece entries (refuses the 5-token trap)."""
    n = len(tokenizer)
    if n != expected:
        raise ImageRewardVocabError(
            f"tokenizer built from {source} has {n} tokens, expected {expected}. "
            + ("This is the transformers >= 5 trap where BertTokenizer(vocab_file=...) silently keeps only the "
               "special tokens, so every word would become [UNK]. " if n <= len(EXTRA_SPECIAL_TOKENS) + 5 else "")
            + f"Use the bert-base-uncased vocab.txt ({VOCAB_URL}).")


def load_tokenizer(vocab_file: str | Path, config: ImageRewardConfig):
    """ImageReward's tokenizer: bert-base-uncased WordPiece from a local vocab.txt plus [DEC] (bos) and [ENC].

    The vocab is copied into a private temporary folder as vocab.txt and loaded with from_pretrained on that folder
    (local files only), which builds the full vocabulary on transformers 4.50 (Python tokenizer) and 5.x (Rust);
    the size is checked against the model's table before and after adding the two special tokens.
    """
    from transformers import BertTokenizer

    path = Path(vocab_file)
    data = _read_vocab_bytes(path)
    n_lines = count_vocab_lines(data)
    if n_lines != config.base_vocab_tokens:
        raise ImageRewardVocabError(
            f"{path} has {n_lines} entries but the model ({config.name}, word table {config.vocab_size}) needs "
            f"{config.base_vocab_tokens} plus {'/'.join(EXTRA_SPECIAL_TOKENS)}. For ImageReward-v1.0 use the "
            f"bert-base-uncased vocab.txt ({VOCAB_URL}).")
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
            f"expected {config.vocab_size} and {(config.dec_token_id, config.enc_token_id)}.")
    return tok


# ---------------------------------------------------------------------------------------------------------------
# Synthetic vocabulary for demos on a fresh machine (no real vocab, no network)
# ---------------------------------------------------------------------------------------------------------------
_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_PUNCT = tuple(".,;:!?'\"()-/&%$#@*+=<>[]_~`^|\\{}")
_WORDS = (
    "a an the of and or in on at to from with by for over under into through near above below behind between "
    "is are was were be been it its this that these those there here he she they we you i his her their our "
    "man woman person people child dog cat bird horse fish car boat train plane tree forest mountain river lake "
    "sea ocean beach sky cloud sun moon star rain snow fire water light night day morning evening city street "
    "road house room window door table chair field meadow grass flower garden park bridge tower castle "
    "red orange yellow green blue purple white black brown gray golden silver dark bright "
    "big small tall short long old young new happy slow fast soft warm cold beautiful "
    "run walk fly swim jump dance sit stand look play drive ride fall rise move turn "
    "camera shot view close wide aerial slow motion video scene shallow depth focus cinematic style"
).split()
_SUFFIXES = ("s", "es", "ed", "ing", "ly", "er", "est", "tion", "ness", "ful", "y", "al", "ic", "ous")


def synthetic_vocab_tokens() -> list[str]:
    """A small WordPiece vocabulary: BERT's specials, letters, digits, punctuation, common words, ## pieces."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    digits = [str(d) for d in range(10)]
    tokens = list(_SPECIAL) + list(_PUNCT) + letters + digits + list(_WORDS)
    tokens += [f"##{s}" for s in letters + digits + list(_SUFFIXES)]
    return list(dict.fromkeys(tokens))  # drop duplicates, keep order


def write_synthetic_vocab(path: str | Path) -> Path:
    """Write the synthetic vocab.txt (a few hundred entries) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(synthetic_vocab_tokens()) + "\n", encoding="utf-8")
    return p


def synthetic_tiny_config(vocab_file: str | Path) -> ImageRewardConfig:
    """The tiny preset with its word table sized to a vocab file (entries + [DEC] + [ENC])."""
    n = count_vocab_lines(_read_vocab_bytes(Path(vocab_file)))
    return TINY.with_vocab(n + len(EXTRA_SPECIAL_TOKENS))
