"""Checkpoint reading: .safetensors and torch pickles (weights_only), prefix normalisation, strict Wan loading.

Every failure raises `CheckpointError` with one message naming the file, the detected preset (when known)
and what is wrong, so a ComfyUI user can act on it. Nothing here touches the network.
"""
from __future__ import annotations

import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch

from ..models.wan_config import WanDiTConfig, detect_preset, get_preset
from .keycheck import key_mismatch
from ..models.wan import WanDiT

SAFETENSORS_EXT = (".safetensors", ".sft")
PICKLE_EXT = (".pt", ".pth", ".ckpt", ".bin")
# Prefixes seen in the wild: Self-Forcing/Krea (`model.`), ComfyUI saves (`model.diffusion_model.`),
# other tools (`diffusion_model.`), DDP (`module.`). Longest first.
KNOWN_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "module.", "model.")
# Self-Forcing training checkpoints hold several networks; `generator_ema` is what Self-Forcing's README
# recommends for inference, `generator` is what the published SDVG code loaded.
SELF_FORCING_ENTRIES = ("generator_ema", "generator")
DEFAULT_PT_ENTRY = "generator_ema"


class CheckpointError(ValueError):
    """A checkpoint file could not be used; the message says which file, why, and what to do."""


@dataclass(frozen=True)
class LoadReport:
    """What was loaded, so nodes and the CLI can say it (which Self-Forcing entry, which prefix, which preset)."""

    path: str
    preset: str
    entry: str | None  # Self-Forcing entry used (generator / generator_ema), None for flat files
    stripped_prefix: str
    dtype: str
    num_tensors: int
    num_params: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        parts = [f"{Path(self.path).name}: preset {self.preset}, {self.num_params / 1e6:.1f}M params, {self.dtype}"]
        if self.entry:
            parts.append(f"entry '{self.entry}'")
        if self.stripped_prefix:
            parts.append(f"prefix '{self.stripped_prefix}' stripped")
        return ", ".join(parts)


def check_path(path: str | os.PathLike, what: str = "checkpoint", folder_hint: str | None = None) -> Path:
    """Fail clearly on a missing path or a directory; return the Path."""
    p = Path(path)
    if p.is_dir():
        raise CheckpointError(f"{what} path {p} is a directory; give the checkpoint file itself"
                              + (f" (expected in {folder_hint})" if folder_hint else ""))
    if not p.exists():
        where = folder_hint or str(p.parent)
        raise CheckpointError(f"{what} file not found: {p} (looked in {where})")
    return p


def read_state_dict(path: str | os.PathLike, *, pt_entry: str | None = DEFAULT_PT_ENTRY,
                    dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], str | None]:
    """Read every tensor of a .safetensors or torch-pickle file onto the CPU.

    Pickles load with `weights_only=True` only, so a file that tries to run code is refused. For
    Self-Forcing-style files holding several networks, `pt_entry` picks one (returned as the second value).
    With `dtype`, floating tensors are cast while reading (peak memory stays near the final size).
    """
    p = check_path(path)
    suffix = p.suffix.lower()
    entry_used = None
    if suffix in SAFETENSORS_EXT:
        from safetensors import SafetensorError, safe_open

        sd: dict[str, torch.Tensor] = {}
        try:
            with safe_open(str(p), framework="pt", device="cpu") as f:
                for k in f.keys():
                    t = f.get_tensor(k)
                    sd[k] = t.to(dtype) if (dtype is not None and t.is_floating_point()) else t
        except (SafetensorError, OSError, RuntimeError) as e:
            raise CheckpointError(f"{p} is not a readable .safetensors file (truncated or corrupt?): {e}") from e
        return sd, None
    if suffix not in PICKLE_EXT:
        raise CheckpointError(f"{p}: unsupported checkpoint extension '{suffix}' (use .safetensors or .pt/.pth)")
    try:
        obj = torch.load(str(p), map_location="cpu", weights_only=True, mmap=_is_zip(p))
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{p} was refused: it is a pickle that wants to run code or build non-tensor objects, and this pack "
            f"only loads plain weights (torch.load weights_only=True). Re-save it as .safetensors. Detail: "
            f"{str(e).splitlines()[0]}") from e
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as e:
        raise CheckpointError(f"{p} could not be read as a torch checkpoint (truncated or corrupt?): {e}") from e
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{p} holds a {type(obj).__name__}, not a dict of tensors")
    present = [k for k in SELF_FORCING_ENTRIES if k in obj and isinstance(obj[k], Mapping)]
    if present:
        if pt_entry is None:
            pt_entry = present[0]
        if pt_entry not in obj:
            raise CheckpointError(f"{p} has no '{pt_entry}' entry; it has {sorted(k for k in obj if isinstance(obj[k], Mapping))}")
        obj, entry_used = obj[pt_entry], pt_entry
    elif "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        obj, entry_used = obj["state_dict"], "state_dict"
    sd = {}
    for k, v in obj.items():
        if not isinstance(v, torch.Tensor):
            raise CheckpointError(f"{p}: entry '{k}' is a {type(v).__name__}, not a tensor")
        sd[k] = v.to(dtype) if (dtype is not None and v.is_floating_point()) else v
    return sd, entry_used


def _is_zip(p: Path) -> bool:
    try:
        return zipfile.is_zipfile(p)
    except OSError:
        return False


def strip_prefix(sd: Mapping[str, torch.Tensor], anchor: str) -> tuple[dict[str, torch.Tensor], str]:
    """Remove the known prefix under which `anchor` (e.g. 'patch_embedding.weight') is found; keep others."""
    if anchor in sd:
        return dict(sd), ""
    for prefix in KNOWN_PREFIXES:
        if prefix + anchor in sd:
            return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}, prefix
    return dict(sd), ""


def strict_load(module: torch.nn.Module, sd: Mapping[str, torch.Tensor], *, path: str, preset: str) -> None:
    """load_state_dict(strict=True) with one readable error listing missing/unexpected/mis-shaped keys."""
    own = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    problem = key_mismatch(own, {k: tuple(v.shape) for k, v in sd.items()})
    if problem:
        hint = ""
        if any(k.endswith("scale_weight") or k == "scaled_fp8" for k in sd if k not in own):
            hint = (" This looks like a scaled-fp8 file: load it with ComfyUI's Load Diffusion Model node and "
                    "connect its MODEL instead.")
        raise CheckpointError(f"{path}: does not fit preset '{preset}': {problem}.{hint}")
    module.load_state_dict(sd, strict=True)

def load_wan_dit(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 pt_entry: str | None = DEFAULT_PT_ENTRY, preset: str | None = None) -> tuple[WanDiT, WanDiTConfig, LoadReport]:
    """Load a Wan 2.1 T2V DiT (official, Self-Forcing .pt, Krea, ComfyUI-saved) strictly into `WanDiT`."""
    p = str(path)
    raw, entry = read_state_dict(p, pt_entry=pt_entry, dtype=dtype)
    sd, prefix = strip_prefix(raw, "patch_embedding.weight")
    try:
        cfg = detect_preset(sd) if preset is None else get_preset(preset)
    except ValueError as e:
        raise CheckpointError(f"{p}: {e}") from e
    with torch.device("meta"):
        net = WanDiT(cfg)
    net = net.to_empty(device="cpu")
    strict_load(net, sd, path=p, preset=cfg.name)
    net = net.to(device=device, dtype=dtype).eval().requires_grad_(False)
    report = LoadReport(path=p, preset=cfg.name, entry=entry, stripped_prefix=prefix, dtype=str(dtype).replace("torch.", ""),
                        num_tensors=len(sd), num_params=sum(t.numel() for t in sd.values()))
    return net, cfg, report


def save_state_dict(sd: Mapping[str, torch.Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write tensors as .safetensors (contiguous copies), the format this pack prefers."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in sd.items()}, str(path), metadata=metadata)
