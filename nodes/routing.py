"""The routing decoder in ComfyUI: a tiny decoder (TAEHV for Wan 2.1) whose frames ImageReward scores instead of the
VAE's. SDVG Start's / SDVG Generate's `route_vae` input takes core's Load VAE holding a TAEHV (ComfyUI 0.33+ lists
`lighttaew2_1*` / `taehv*` files of models/vae_approx there), or SDVG Load Routing Decoder (any taew2_1 /
lighttaew2_1 file of models/vae_approx, on every supported host; it can also decode the video, a fast preview).

The loader node is route_loader.py. Either way the weights go into the core's own TAEHV (sdvg_core/models/taehv.py:
explicit, immutable memory), built once per weights and keyed by a digest of them, like the Wan VAE (hosted.py);
ComfyUI loads it before each decode.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

import comfy.model_management as mm
from comfy_api.latest import io

from ..sdvg_core.io.checkpoint import CheckpointError, load_taehv
from ..sdvg_core.models.taehv import TAEHV
from . import comfy_memory
from .comfy_compiler import compiler_off
from .folders import resolve_file
from .hosted import dtype_name, weights_token
from .surface import SDVGError, sentence

ROUTE_FOLDER = "vae_approx"  # ComfyUI's own folder of tiny decoders (its previews' TAESD files live there too)
NO_FILE = "none"
ROUTE_SOURCE = ("madebyollin/taehv (https://huggingface.co/madebyollin/taehv, taew2_1.safetensors) or LightX2V "
                "(https://huggingface.co/lightx2v/Autoencoders, lighttaew2_1.safetensors)")
SDVGRouteDecoder = io.Custom("SDVG_ROUTE_DECODER")  # RouteDecoder: a hosted tiny decoder and whether it decodes the video


class HostedTAEHV:
    """The core's TAEHV under a ModelPatcher: ComfyUI loads it (only it) before each decode."""

    def __init__(self, taehv: TAEHV, key: str, info: str):
        self.inner, self.key, self.info = taehv, key, info
        self.patcher = comfy_memory.managed(taehv, mm.vae_device(), mm.vae_offload_device())

    def decode_stream(self, *args, **kwargs):
        comfy_memory.load(self.patcher, force_full_load=True)
        with compiler_off():
            return self.inner.decode_stream(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # config, device, dtype, decoder_slots of the core's TAEHV
        if "inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)


@dataclass(frozen=True)
class RouteDecoder:
    """What SDVG Load Routing Decoder outputs: the decoder, and whether it also decodes the video (a fast preview)."""

    decoder: HostedTAEHV
    decode_output: bool = False


_FROM_VAE: "weakref.WeakKeyDictionary[Any, HostedTAEHV]" = weakref.WeakKeyDictionary()


def route_dtype() -> torch.dtype:
    """fp16 on a GPU (TAEHV's published weights are fp16-safe), fp32 on the CPU."""
    return torch.float16 if mm.vae_device().type == "cuda" else torch.float32


def from_comfy_vae(comfy_vae: Any) -> HostedTAEHV:
    """The core's TAEHV from a ComfyUI VAE holding ComfyUI's TAEHV (core Load VAE), once per VAE object.

    ComfyUI hands its VAE the sampler's raw Wan latents and a TAEHV it loaded without a latent format decodes them as
    they are (LightX2V's lighttaew2_1): the core's decoder takes them the same way (latent space "raw"), so its frames
    are the ones core's VAE Decode would show. One ComfyUI gives a latent format (HunyuanVideo's taehv, read so from
    fp16 weights) is refused."""
    hosted = _FROM_VAE.get(comfy_vae)
    if hosted is not None:
        return hosted
    inner = getattr(comfy_vae, "first_stage_model", None)
    if inner is None or "decoder.22.bias" not in (sd := inner.state_dict()):
        raise SDVGError(f"route_vae: the VAE ({type(inner or comfy_vae).__name__}) is not a tiny decoder (TAEHV). "
                        f"Load lighttaew2_1.safetensors from models/vae_approx with Load VAE, or pick a taew2_1 / "
                        f"lighttaew2_1 file in SDVG Load Routing Decoder; the full VAE goes to the 'vae' input")
    fmt = getattr(inner, "latent_format", None)
    if fmt is not None:
        raise SDVGError(f"route_vae: ComfyUI read this tiny VAE with the {getattr(fmt, '__name__', fmt)} latent "
                        f"format (HunyuanVideo's taehv, or fp16 weights it takes for it). For Wan 2.1 use "
                        f"lighttaew2_1 with Load VAE, or put taew2_1.safetensors in models/vae_approx and pick it in "
                        f"SDVG Load Routing Decoder")
    dtype = getattr(comfy_vae, "vae_dtype", None) or torch.float32
    try:
        taehv = TAEHV.from_state_dict(sd, dtype=dtype, device=mm.vae_offload_device(), name="comfy-taehv",
                                      latent_space="raw")
    except (CheckpointError, ValueError) as e:
        raise SDVGError(f"route_vae: {sentence(e)}") from e
    key = f"taehv|{weights_token(inner)}|{dtype_name(dtype)}|raw"  # the same weights: the same key across reloads
    hosted = _FROM_VAE[comfy_vae] = HostedTAEHV(taehv, key, f"tiny decoder from Load VAE ({dtype_name(dtype)}, raw "
                                                            f"latents as ComfyUI decodes them)")
    return hosted


_FROM_FILE: dict[str, HostedTAEHV] = {}  # by the loader's key (file identity + dtype + latent space)


def from_file(name: str) -> HostedTAEHV:
    """A taew2_1 / lighttaew2_1 file of models/vae_approx through the core's loader (its name says its latents)."""
    path = resolve_file(ROUTE_FOLDER, name, "SDVG Load Routing Decoder", ROUTE_SOURCE)
    try:
        taehv = load_taehv(path, device=mm.vae_offload_device(), dtype=route_dtype())
    except CheckpointError as e:
        raise SDVGError(f"SDVG Load Routing Decoder: {sentence(e)}") from e
    hosted = _FROM_FILE.get(taehv.key)
    if hosted is None:
        hosted = _FROM_FILE[taehv.key] = HostedTAEHV(taehv, taehv.key, f"{name} ({dtype_name(route_dtype())}, "
                                                                       f"{taehv.config.latent_space} latents)")
    return hosted


def route_input() -> io.Input:
    """SDVG Start's / SDVG Generate's `route_vae`: core's Load VAE (a TAEHV) or SDVG Load Routing Decoder."""
    return io.MultiType.Input(
        "route_vae", types=[io.Vae, SDVGRouteDecoder], optional=True,
        tooltip="Optional: a tiny decoder to score the drafts with (the video is still decoded by 'vae'): core's Load "
                "VAE with lighttaew2_1 from models/vae_approx, or SDVG Load Routing Decoder (taew2_1 / lighttaew2_1; "
                "it can decode the video too, as a fast preview). Decoding a draft costs a fraction of the full VAE's, "
                "but the tiny decoder's frames score differently: calibrate tau first (python -m "
                "sdvg_core.demo.calibrate). The report names the routing decoder.")


def resolve(what: str, value: Any) -> tuple[HostedTAEHV | None, bool]:
    """(the routing decoder or None, whether it decodes the video) of a `route_vae` input value."""
    if value is None:
        return None, False
    if isinstance(value, RouteDecoder):
        return value.decoder, value.decode_output
    if isinstance(value, HostedTAEHV):
        return value, False
    return from_comfy_vae(value), False
