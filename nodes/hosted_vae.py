"""The Wan VAE hosted by ComfyUI: SDVG's streaming VAE (explicit, immutable decoder cache) built once from the weights
of a ComfyUI VAE (Load VAE) and loaded by ComfyUI before every decode/encode."""
from __future__ import annotations

import weakref
from typing import Any

import torch

import comfy.model_management as mm

from ..sdvg_core.models.vae import WanVAE
from . import comfy_memory
from .dtypes import dtype_name
from .errors import SDVGError
from .identity import weights_token


class HostedVAE:
    """Our streaming Wan VAE (explicit immutable decoder cache) built from a ComfyUI VAE's weights."""

    def __init__(self, vae: WanVAE, key: str):
        self.inner, self.key = vae, key
        self.patcher = comfy_memory.managed(vae, mm.vae_device(), mm.vae_offload_device())

    def ensure_loaded(self) -> None:
        comfy_memory.load(self.patcher, force_full_load=True)

    def decode_stream(self, *args, **kwargs):
        self.ensure_loaded()
        return self.inner.decode_stream(*args, **kwargs)

    def encode_anchor_frame(self, *args, **kwargs):
        self.ensure_loaded()
        return self.inner.encode_anchor_frame(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # config, device, decoder_slots, ... of our WanVAE
        if "inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)


_VAES: "weakref.WeakKeyDictionary[Any, HostedVAE]" = weakref.WeakKeyDictionary()


def host_vae(comfy_vae: Any) -> HostedVAE:
    """Convert a ComfyUI VAE (VAELoader) once per VAE object; later calls return the same hosted VAE."""
    hosted = _VAES.get(comfy_vae)
    if hosted is not None:
        return hosted
    inner = getattr(comfy_vae, "first_stage_model", None)
    if inner is None:
        raise SDVGError(f"the VAE input is a {type(comfy_vae).__name__}; connect ComfyUI's 'Load VAE' with the "
                        f"Wan 2.1 VAE (wan_2.1_vae.safetensors, https://huggingface.co/Comfy-Org/"
                        f"Wan_2.1_ComfyUI_repackaged, split_files/vae/)")
    dtype = getattr(comfy_vae, "vae_dtype", None) or torch.float32
    try:
        ours = WanVAE.from_state_dict(inner.state_dict(), dtype=dtype, device=mm.vae_offload_device())
    except ValueError as e:
        raise SDVGError(f"the VAE is not the Wan 2.1 VAE SDVG needs ({e}). Load wan_2.1_vae.safetensors "
                        f"(https://huggingface.co/Comfy-Org/Wan_2.1_ComfyUI_repackaged, split_files/vae/) with "
                        f"'Load VAE'. The Wan 2.2 VAE does not fit Wan 2.1 models.") from e
    # keyed by its weights, not the object: a VAE reloaded after ComfyUI's cache dropped it keeps its cached results
    hosted = _VAES[comfy_vae] = HostedVAE(ours, f"vae|{weights_token(inner)}|{dtype_name(dtype)}")
    return hosted
