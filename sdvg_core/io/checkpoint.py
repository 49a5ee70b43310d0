"""The Wan DiT / VAE / TAEHV loaders: a checkpoint's tensors (read by tensor_file.py, the one reader of every model file)
checked against the architecture and loaded strictly, a LoRA merged at load (lora.py).

Every failure raises `CheckpointError` naming the file, what is wrong and what to do. Nothing here touches the
network. The reader's names are re-exported here, where loaders and hosts have always imported them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch

from ..models.taehv import TAEHV, LatentSpace, detect_taehv_config
from ..models.vae import VAE_LAYOUT, WanVAE, WanVAEConfig
from ..models.wan import WanDiT
from ..models.wan_config import (
    INDISTINGUISHABLE_NOTE, WanDiTConfig, WrongWanModel, check_t2v_state_dict, detect_preset, get_preset,
)
from ..models.state_dict import CheckpointError, KeyLayout, key_mismatch, normalize_prefix, strip_wrapper_names
from .lora import LoraSpec, check_lora, describe_lora, lora_identity, merge_lora, read_lora
from .tensor_file import (  # noqa: F401  (re-exported)
    DEFAULT_PT_ENTRY, LORA_ENTRY, PICKLE_EXT, SAFETENSORS_EXT, SELF_FORCING_ENTRIES, WRAPPER_ENTRIES, check_path,
    file_identity, read_state_dict,
)

__all__ = [
    "CheckpointError", "LoadReport", "DIT_LAYOUT", "check_path", "read_state_dict", "file_identity", "strict_load",
    "load_wan_dit", "load_wan_vae", "load_taehv", "save_state_dict", "SELF_FORCING_ENTRIES", "DEFAULT_PT_ENTRY", "LORA_ENTRY",
]

# Prefixes seen in the wild: ComfyUI saves (`model.diffusion_model.`), other tools (`diffusion_model.`), DDP
# (`module.`), Self-Forcing/Krea (`model.`). Longest first. Other keys of a full checkpoint (VAE, text encoder) drop.
DIT_LAYOUT = KeyLayout("Wan 2.1 DiT", ("patch_embedding.weight",),
                       ("model.diffusion_model.", "diffusion_model.", "module.", "model."), keep_unprefixed=False)


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
    key: str = ""  # stable identity of the loaded weights: file identity + entry + dtype (+ LoRA file and alpha)
    notes: tuple[str, ...] = field(default_factory=tuple)  # e.g. FSDP names removed, LoRA merged

    def describe(self) -> str:
        parts = [f"{Path(self.path).name}: preset {self.preset}, {self.num_params / 1e6:.1f}M params, {self.dtype}"]
        if self.entry:
            parts.append(f"entry '{self.entry}'")
        if self.stripped_prefix:
            parts.append(f"prefix '{self.stripped_prefix}' stripped")
        return ", ".join([*parts, *self.notes])


def strict_load(module: torch.nn.Module, sd: Mapping[str, torch.Tensor], *, path: str, preset: str) -> None:
    """load_state_dict(strict=True) with one readable error listing missing/unexpected/mis-shaped keys."""
    own = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    problem = key_mismatch(own, {k: tuple(v.shape) for k, v in sd.items()})
    if problem:
        hint = ""
        if any(k.endswith("scale_weight") or k == "scaled_fp8" for k in sd if k not in own):
            hint = (" This looks like a scaled-fp8 file: load it with ComfyUI's Load Diffusion Model node and "
                    "connect its MODEL instead.")
        raise CheckpointError(f"{path}: does not fit preset '{preset}': {problem}.{hint}", path)
    module.load_state_dict(sd, strict=True)


def _resolve_dit_config(config: WanDiTConfig | str | None, sd: Mapping[str, torch.Tensor], path: str) -> WanDiTConfig:
    if isinstance(config, WanDiTConfig):
        return config
    try:
        return detect_preset(sd) if config is None else get_preset(config)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}", path) from e


def load_wan_dit(path: str | os.PathLike, config: WanDiTConfig | str | None = None, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 pt_entry: str | None = DEFAULT_PT_ENTRY, preset: str | None = None,
                 lora: LoraSpec | None = None) -> tuple[WanDiT, WanDiTConfig, LoadReport]:
    """Load a Wan 2.1 T2V DiT (official, Self-Forcing / Causal Forcing / LongLive .pt, Krea, ComfyUI-saved) strictly.

    `config`: a WanDiTConfig (any Wan 2.1 block-causal T2V size), a preset name, or None to detect the preset
    from the shapes (`preset` is the older name of the same argument). Other Wan models are refused. FSDP's
    `_fsdp_wrapped_module.` is removed from key names. `lora` (io.lora.LoraSpec): a peft LoRA merged into the
    weights in float32 before the cast to `dtype`; the LoRA file is read and checked against the model's shapes
    before the base weights are loaded, and its identity and alpha join the report's key.
    """
    p = str(path)
    lora_weights = read_lora(lora.path) if lora is not None else None  # a malformed LoRA fails before the base read
    # with a LoRA the base keeps its file precision until the merge: one rounding to `dtype`, after it
    raw, entry = read_state_dict(p, pt_entry=pt_entry, dtype=None if lora is not None else dtype,
                                 what="Wan DiT checkpoint")
    unwrapped = strip_wrapper_names(raw, p)
    notes = ["FSDP names removed"] if len(unwrapped) and unwrapped.keys() != raw.keys() else []
    sd, prefix = normalize_prefix(unwrapped, DIT_LAYOUT, p)
    try:
        check_t2v_state_dict(sd, p)
    except WrongWanModel as e:
        raise CheckpointError(f"{e} {INDISTINGUISHABLE_NOTE}", p) from e
    cfg = _resolve_dit_config(config if config is not None else preset, sd, p)
    with torch.device("meta"):
        net = WanDiT(cfg)
    if lora_weights is not None:  # rank, targets and widths against the model's shapes (meta: nothing allocated)
        check_lora(lora_weights, net, lora.rank, lora.every_block_linear, base=f"{Path(p).name} ({cfg.name})")
    net = net.to_empty(device="cpu")
    strict_load(net, sd, path=p, preset=cfg.name)
    dtype_name = str(dtype).replace("torch.", "")
    key = f"{file_identity(p)}|{entry or ''}|{dtype_name}"
    if lora_weights is not None:
        merge_lora(net, lora_weights, lora.alpha, lora.rank, lora.every_block_linear)
        notes.append(describe_lora(lora, lora_weights))
        key += f"|{lora_identity(lora)}"
    net = net.to(device=device, dtype=dtype).eval().requires_grad_(False)
    report = LoadReport(path=p, preset=cfg.name, entry=entry, stripped_prefix=prefix, dtype=dtype_name,
                        num_tensors=len(sd), num_params=sum(t.numel() for t in sd.values()), key=key,
                        notes=tuple(notes))
    return net, cfg, report


def load_wan_vae(path: str | os.PathLike, config: WanVAEConfig | str | None = None, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> WanVAE:
    """Load the Wan 2.1 VAE (Wan2.1_VAE.pth, wan_2.1_vae.safetensors, prefixed dumps) strictly; sets `vae.key`.

    `config`: a WanVAEConfig, a preset name, or None to detect the preset from the shapes.
    """
    p = str(path)
    raw, _ = read_state_dict(p, pt_entry=None, what="Wan VAE checkpoint")
    sd, _ = normalize_prefix(raw, VAE_LAYOUT, p)
    try:
        vae = WanVAE.from_state_dict(sd, config, dtype=dtype, device=device)
    except CheckpointError as e:
        raise CheckpointError(str(e), p) from e
    except ValueError as e:  # an unknown preset name
        raise CheckpointError(f"{p}: {e}", p) from e
    vae.key = f"{file_identity(p)}|{str(dtype).replace('torch.', '')}"
    return vae


# TAEHV files as published: madebyollin/taehv `taew2_1.pth` (also .safetensors) and LightX2V's `lighttaew2_1*`.
# Wrappers seen on other VAEs are accepted too (a ComfyUI full-model dump, a `vae.` packager).
TAEHV_LAYOUT = KeyLayout("TAEHV", ("decoder.22.bias",), ("first_stage_model.", "vae."), keep_unprefixed=False)
# The file name is the only sign of which latents a TAEHV file takes (the weights have the same names and shapes):
# LightX2V's LightTAE files decode the Wan VAE's own latents (its `need_scaled`), taew2_1 the DiT's normalised ones.
RAW_LATENT_PREFIXES = ("lighttae",)
# HunyuanVideo's tiny decoder has taew2_1's exact shapes but another latent space; its published names.
HUNYUAN_PREFIXES = ("taehv", "lighttaehy")


def taehv_latent_space(path: str | os.PathLike) -> LatentSpace:
    """"raw" for a LightX2V LightTAE file name (lighttaew2_1*), else "normalised" (taew2_1)."""
    return "raw" if Path(path).name.lower().startswith(RAW_LATENT_PREFIXES) else "normalised"


def load_taehv(path: str | os.PathLike, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *,
               latent_space: LatentSpace | None = None) -> TAEHV:
    """Load a TAEHV for Wan 2.1 (taew2_1.pth / .safetensors, lighttaew2_1*) strictly; sets `taehv.key`.

    Recognised as ComfyUI does (a `decoder.22.bias` key; latent channels = decoder.1.weight.shape[1], which must be
    16); widths and strides are read from the shapes. `latent_space`: which latents the file decodes, by default
    from its name (`taehv_latent_space`). A wrong file raises CheckpointError naming it and what is wrong.
    """
    p = str(path)
    name = Path(p).name
    if name.lower().startswith(HUNYUAN_PREFIXES):
        raise CheckpointError(f"{p}: '{name}' is named as HunyuanVideo's tiny decoder (taehv / lighttaehy), which "
                              f"decodes HunyuanVideo latents; SDVG needs the Wan 2.1 one: taew2_1.pth or lighttaew2_1", p)
    raw, _ = read_state_dict(p, pt_entry=None, what="TAEHV (tiny Wan 2.1 autoencoder) checkpoint")
    sd, _ = normalize_prefix(raw, TAEHV_LAYOUT, p)
    space = taehv_latent_space(p) if latent_space is None else latent_space
    try:
        config = detect_taehv_config(sd, name=Path(p).stem, latent_space=space)
        model = TAEHV.from_state_dict(sd, config, dtype=dtype, device=device)
    except CheckpointError as e:
        raise CheckpointError(f"{p}: {e}", p) from e
    model.key = f"{file_identity(p)}|{str(dtype).replace('torch.', '')}|{space}"
    return model


def save_state_dict(sd: Mapping[str, torch.Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write tensors as .safetensors (contiguous copies), the format this pack prefers."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in sd.items()}, str(path), metadata=metadata)
