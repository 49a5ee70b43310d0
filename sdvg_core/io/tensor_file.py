"""Reading a checkpoint file's tensors: the one reader every loader uses (Wan DiT, Wan VAE, LoRA, ImageReward).

Formats: .safetensors (safetensors) and torch pickles (.pt/.pth/.ckpt/.bin) through `torch.load(weights_only=True)`,
memory-mapped when the file is a torch zip archive. Self-Forcing files (`generator_ema` / `generator` entries) and
`state_dict` wrappers are unwrapped. Every failure raises `CheckpointError` naming the file, what is wrong and what
to do; corrupt files, empty files and pickles that want to run code get different messages. Nothing here touches
the network.
"""
from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Mapping

import torch

from ..models.state_dict import CheckpointError, key_list

__all__ = ["check_path", "read_state_dict", "read_shapes", "file_identity", "SAFETENSORS_EXT", "PICKLE_EXT", "SELF_FORCING_ENTRIES",
           "DEFAULT_PT_ENTRY", "WRAPPER_ENTRIES", "LORA_ENTRY"]

SAFETENSORS_EXT = (".safetensors", ".sft")
PICKLE_EXT = (".pt", ".pth", ".ckpt", ".bin")
# Self-Forcing training checkpoints hold several networks; `generator_ema` is what Self-Forcing's README
# recommends for inference, `generator` is what the published SDVG code loaded.
SELF_FORCING_ENTRIES = ("generator_ema", "generator")
DEFAULT_PT_ENTRY = "generator_ema"
# Single-network wrappers: Lightning / generic training (`state_dict`); LongLive's loader also takes `model`.
WRAPPER_ENTRIES = ("state_dict", "model")
# LongLive's LoRA files wrap the peft state dict in this entry (io/lora.py reads them).
LORA_ENTRY = "generator_lora"
# Words in torch's weights_only refusal when the pickle names a global (a class or function to import and call):
# what a code-running payload (__reduce__) needs. Other unpickling failures mean the bytes are not a checkpoint.
_UNSAFE_MARKERS = ("global", "can only build", "can only create new object")
# torch warns about non-default pickle protocols while reading old files; the reader reports problems itself.
_PROTOCOL_WARNING = "Detected pickle protocol"
# Lines of torch's weights_only error text that are advice, not the reason (the reason is the remaining line).
_TORCH_BOILERPLATE = ("Weights only load failed", "weights_only", "torch.load", "Please file an issue",
                      "WeightsUnpickler error:")
# torch's weights_only unpickler names the FRAME opcode (0x95, pickle protocol >= 4) it does not support this way.
_NEW_PROTOCOL_OPCODE = "Unsupported operand 149"


def check_path(path: str | os.PathLike, what: str = "checkpoint", folder_hint: str | None = None,
               error: type[CheckpointError] = CheckpointError) -> Path:
    """Fail clearly on a missing path, a directory or an empty file; return the Path."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise error(f"{what} path {p} is a directory; give the checkpoint file itself"
                    + (f" (expected in {folder_hint})" if folder_hint else ""), p)
    if not p.exists():
        where = folder_hint or str(p.parent)
        raise error(f"{what} file not found: {p} (looked in {where})", p)
    if p.stat().st_size == 0:
        raise error(f"{p} is empty (0 bytes): the download or copy did not finish. Download the {what} again.", p)
    return p


def file_identity(path: str | os.PathLike) -> str:
    """'<absolute path>:<mtime ns>:<size>': changes when the file is replaced, stable while it is not."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    return f"{p}:{st.st_mtime_ns}:{st.st_size}"


def _cast(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return t.to(dtype) if (dtype is not None and t.is_floating_point()) else t


def _read_safetensors(p: Path, dtype: torch.dtype | None, error: type[CheckpointError], hint: str) -> dict:
    from safetensors import SafetensorError, safe_open

    sd: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(p), framework="pt", device="cpu") as f:
            for k in f.keys():
                sd[k] = _cast(f.get_tensor(k), dtype)
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise error(f"{p} ({p.stat().st_size:,} bytes) is not a readable checkpoint (corrupt or truncated): the "
                    f"safetensors reader says {e}. Download it again{hint}.", p) from e
    return sd


def _read_pickle(p: Path, error: type[CheckpointError], hint: str) -> object:
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            return torch.load(str(p), map_location="cpu", weights_only=True, mmap=_is_zip(p))
    except pickle.UnpicklingError as e:
        text = str(e)
        detail = next((ln.strip() for ln in text.splitlines() if any(m in ln.lower() for m in _UNSAFE_MARKERS)), "")
        if detail:
            raise error(f"{p} was refused as unsafe: unpickling it would import and run code ({detail}). This pack "
                        f"only loads plain weights (torch.load weights_only=True). Use the .safetensors version of "
                        f"this model, or re-save the weights as .safetensors from a trusted environment{hint}.", p) from e
        protocol = next((str(w.message).split()[3] for w in caught if str(w.message).startswith(_PROTOCOL_WARNING)), "")
        if protocol and _NEW_PROTOCOL_OPCODE in text:
            raise error(f"{p} was written with pickle protocol {protocol}, which torch's safe reader (weights_only=True) "
                        f"cannot open. Re-save it as .safetensors (or with torch.save's default protocol).", p) from e
        raise error(_corrupt(p, e, hint), p) from e
    except Exception as e:  # random bytes raise anything: EOFError, KeyError, IndexError, RuntimeError (zip)...
        raise error(_corrupt(p, e, hint), p) from e
    finally:  # pass on every warning but torch's pickle-protocol note (the messages above say what matters)
        for w in caught:
            if not str(w.message).startswith(_PROTOCOL_WARNING):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _corrupt(p: Path, e: BaseException, hint: str) -> str:
    """Message for a .pt whose bytes are not a torch checkpoint."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # torch's weights_only errors wrap the one useful line in advice about weights_only=False; keep that line only
    useful = [ln for ln in lines if not any(b in ln for b in _TORCH_BOILERPLATE)]
    detail = f"{type(e).__name__}: {useful[0] if useful else 'no detail'}"
    return (f"{p} ({p.stat().st_size:,} bytes) is not a readable checkpoint (corrupt or truncated): torch.load "
            f"failed ({detail}). Download it again{hint}.")


def read_state_dict(path: str | os.PathLike, *, pt_entry: str | None = DEFAULT_PT_ENTRY,
                    dtype: torch.dtype | None = None, what: str = "checkpoint", hint: str = "",
                    error: type[CheckpointError] = CheckpointError,
                    entries: tuple[str, ...] = SELF_FORCING_ENTRIES) -> tuple[dict[str, torch.Tensor], str | None]:
    """Read every tensor of a .safetensors or torch-pickle file onto the CPU; return (tensors, entry used).

    For training files holding several networks under `entries` (Self-Forcing: generator_ema / generator),
    `pt_entry` picks one (None: the first present); a `state_dict` / `model` wrapper is unwrapped. Other entries
    (a step counter, a critic) are ignored. With `dtype`, floating tensors are cast while reading. `hint` is appended
    to "download it again" messages (where to get the file); `error` is the CheckpointError subclass raised.
    """
    p = check_path(path, what, error=error)
    suffix = p.suffix.lower()
    if suffix in SAFETENSORS_EXT:
        return _read_safetensors(p, dtype, error, hint), None
    if suffix not in PICKLE_EXT:
        raise error(f"{p}: unsupported checkpoint extension '{suffix}'; use .safetensors (preferred) or "
                    f"{'/'.join(PICKLE_EXT)}", p)
    obj, entry_used = _unwrap(_read_pickle(p, error, hint), p, pt_entry, error, entries)
    return {k: _cast(v, dtype) for k, v in obj.items()}, entry_used


def _unwrap(obj: object, p: Path, pt_entry: str | None, error: type[CheckpointError],
            entries: tuple[str, ...]) -> tuple[Mapping, str | None]:
    """The flat dict of tensors in a torch pickle's object, and the entry it came from (read_state_dict's rules)."""
    if not isinstance(obj, Mapping):
        raise error(f"{p} holds a {type(obj).__name__}, not a dict of tensors (a state dict)", p)
    entry_used = None
    present = [k for k in entries if isinstance(obj.get(k), Mapping)]
    wrapper = next((k for k in WRAPPER_ENTRIES if isinstance(obj.get(k), Mapping)), None)
    if present:
        entry = pt_entry if pt_entry is not None else present[0]
        if not isinstance(obj.get(entry), Mapping):
            nested = sorted(str(k) for k, v in obj.items() if isinstance(v, Mapping))
            raise error(f"{p} has no '{entry}' entry; its networks are {nested}", p)
        obj, entry_used = obj[entry], entry
    elif wrapper is not None:
        obj, entry_used = obj[wrapper], wrapper
    elif LORA_ENTRY not in entries and isinstance(obj.get(LORA_ENTRY), Mapping):
        raise error(f"{p} holds a LoRA (entry '{LORA_ENTRY}'), not a whole network: give it as the LoRA file of "
                    f"its base model (LongLive: lora.pt goes with longlive_base.pt)", p)
    bad = [str(k) for k, v in obj.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))]
    if bad:
        raise error(f"{p}: expected a flat dict of tensors (a state dict), but {key_list(bad)} entries are not "
                    f"tensors (a wrapped training checkpoint?); save model.state_dict() instead.", p)
    if not obj:
        raise error(f"{p} holds an empty dict: no weights in it", p)
    return obj, entry_used


def read_shapes(path: str | os.PathLike, *, pt_entry: str | None = None,
                entries: tuple[str, ...] = SELF_FORCING_ENTRIES) -> dict[str, tuple[int, ...]] | None:
    """Every tensor's shape in a checkpoint, read without reading the tensors' bytes (a header look before anything
    loads): .safetensors through its header; torch zip archives memory-mapped (the tensors are built over the mapped
    file, never read). Unwrapped as `read_state_dict` unwraps. None when the file cannot tell without loading it
    (an old non-zip pickle, an unknown extension) or cannot be read (the loader names that problem later)."""
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    try:
        if suffix in SAFETENSORS_EXT:
            from safetensors import safe_open

            with safe_open(str(p), framework="pt", device="cpu") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        if suffix in PICKLE_EXT and _is_zip(p):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = torch.load(str(p), map_location="cpu", weights_only=True, mmap=True)
            sd, _ = _unwrap(obj, p, pt_entry, CheckpointError, entries)
            return {k: tuple(v.shape) for k, v in sd.items()}
    except Exception:  # unreadable (corrupt, truncated, unsafe): the loader's own message comes when it reads the file
        return None
    return None


def _is_zip(p: Path) -> bool:
    try:
        return zipfile.is_zipfile(p)
    except OSError:
        return False
