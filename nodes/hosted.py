"""Models hosted by ComfyUI: the Wan DiT, the Wan VAE and ImageReward under ComfyUI ModelPatchers (every call first
has ComfyUI load that model, and only it), the dtype each computes in, and the stable identities their memo keys hold
(the same weights give the same key across node re-executions; different weights never share one)."""
from __future__ import annotations

import hashlib
import os
import uuid
import weakref
from dataclasses import dataclass, replace
from typing import Any

import torch

import comfy.model_management as mm

from ..sdvg_core.engine.memory import dit_memory
from ..sdvg_core.models.reward import ImageRewardScorer
from ..sdvg_core.models.vae import WanVAE
from ..sdvg_core.models.wan import CausalWan
from ..sdvg_core.io.drafters import drafter_own_recipe
from ..sdvg_core.models.dtypes import DTYPES
from ..sdvg_core.models.wan_config import WanDiTConfig
from . import comfy_memory
from .attention import host_attention
from .comfy_compiler import compiler_off
from .surface import SDVGError

# ------------------------------------------------------------------------------------------------ dtypes
DTYPE_OPTIONS = ["auto", *DTYPES]  # the loaders' dtype widgets: auto (per device, below) or one of DTYPES


def auto_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs that have it, fp16 on other GPUs, fp32 on the CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type in ("mps", "xpu"):
        return torch.float16
    return torch.float32


def pick_dtype(option: str, device: torch.device) -> torch.dtype:
    return auto_dtype(device) if option == "auto" else DTYPES[option]


def reward_dtype(option: str, device: torch.device) -> torch.dtype:
    """ImageReward's backbone dtype: auto is fp16 on accelerators (0.9 GB), fp32 on the CPU (1.8 GB)."""
    if option != "auto":
        return DTYPES[option]
    return DTYPES["fp16"] if device.type != "cpu" else DTYPES["fp32"]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# ------------------------------------------------------------------------------------------------ identities
def file_key(path: str, *extra: str) -> str:
    """Identity of weights read from a file: a changed file (mtime/size) or dtype gives a new key."""
    st = os.stat(path)
    return "|".join(("file", os.path.realpath(path), str(st.st_mtime_ns), str(st.st_size), *extra))


_TOKENS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def object_token(obj: Any) -> str:
    """A uuid per live host object (never reused, unlike id()), for memo keys of ComfyUI-loaded models."""
    tok = _TOKENS.get(obj)
    if tok is None:
        tok = _TOKENS[obj] = uuid.uuid4().hex
    return tok


def weights_token(module: torch.nn.Module) -> str:
    """A digest of a module's tensors (names, shapes, dtypes and every byte): the same weights give the same token
    across reloads. ComfyUI's RAM-pressure output cache may drop a loader's output between queue presses; the
    reloaded object is new, and an object token would then miss every cached result of the same weights."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in module.state_dict().items():
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ the DiTs
class HostedWan(CausalWan):
    """CausalWan whose every model call first asks ComfyUI to load this model (and only this one).

    One per loaded model, shared by every graph that uses it. `work_bytes` is what a call needs beside the weights
    (KV window, text K/V, activations), sized for Krea at 832x480 at load time; a run sizes its own calls through its
    `RunWan` view, never by writing here.
    """

    def __init__(self, net: torch.nn.Module, cfg: WanDiTConfig, patcher, *, dtype: torch.dtype, key: str,
                 full_load: bool, work_bytes: int = 0, compile: bool | str = False):
        super().__init__(net, cfg, dtype=dtype, device=patcher.load_device, key=key, attention_fn=host_attention(patcher),
                         compile=compile)
        self.patcher, self.full_load, self.work_bytes = patcher, full_load, work_bytes

    def ensure_loaded(self, work_bytes: int | None = None) -> None:
        """Have ComfyUI load the weights with `work_bytes` (default: the load-time size) free beside them."""
        required = self.work_bytes if work_bytes is None else work_bytes
        comfy_memory.load(self.patcher, memory_required=required, force_full_load=self.full_load)

    def encode_text(self, *args, **kwargs):
        self.ensure_loaded()
        with compiler_off():
            return super().encode_text(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self.ensure_loaded()
        with compiler_off():
            return super().forward(*args, **kwargs)


class RunWan:
    """One run's view of a shared HostedWan: the same weights, caches and key, with this run's per-call reservation
    (`work_bytes`, sized by Session.reserve for the run's recipe window and video size)."""

    def __init__(self, shared: HostedWan):
        self.shared, self.work_bytes = shared, shared.work_bytes

    def encode_text(self, *args, **kwargs):
        self.shared.ensure_loaded(self.work_bytes)
        with compiler_off():
            return CausalWan.encode_text(self.shared, *args, **kwargs)

    def forward(self, *args, **kwargs):
        self.shared.ensure_loaded(self.work_bytes)
        with compiler_off():
            return CausalWan.forward(self.shared, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # cfg, key, device, dtype, full_load, ... of the shared dit
        if "shared" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["shared"], name)


@dataclass(frozen=True)
class DiTHandle:
    """What a loader node outputs (SDVG_MODEL): the hosted dit and a line saying what was loaded."""

    role: str  # drafter / target
    dit: HostedWan | RunWan
    info: str
    kind: str | None = None  # a drafter's kind (io/drafters.py DRAFTER_KINDS: its own recipe on auto); None: a target
    # latent frames per block the model was trained for, when the loader knows it (SDVG Load Drafter's kinds: 3);
    # None: not known (a ComfyUI MODEL says nothing of it)
    block_frames: int | None = None

    @property
    def own_recipe(self) -> str | None:
        """The context recipe the model was trained for, when not the pairing's (LongLive)."""
        return drafter_own_recipe(self.kind) if self.kind is not None else None

    @property
    def key(self) -> str:
        return self.dit.key

    def for_run(self) -> "DiTHandle":
        """This model with a dit of its own for one run (its reservation is the run's)."""
        shared = self.dit.shared if isinstance(self.dit, RunWan) else self.dit
        return replace(self, dit=RunWan(shared))


# The load-time reservation, until Start knows the recipe and size: Krea at 832x480 (1560 tokens per latent frame,
# a 6-frame window of 3-frame blocks, context rebuilt 3 frames at a time; sdvg_core/engine/recipes KreaRecipe).
DEFAULT_TOKENS_PER_FRAME, DEFAULT_WINDOW_FRAMES, DEFAULT_BLOCK_FRAMES, DEFAULT_CONTEXT_FRAMES = 1560, 6, 3, 3


def work_bytes(cfg: WanDiTConfig, dtype: torch.dtype) -> int:
    """Memory a model call needs beside the weights before Start sizes it (sdvg_core.engine.memory.dit_memory)."""
    return dit_memory(cfg, dtype, tokens_per_frame=DEFAULT_TOKENS_PER_FRAME, window_frames=DEFAULT_WINDOW_FRAMES,
                      frames_per_block=DEFAULT_BLOCK_FRAMES, context_frames=DEFAULT_CONTEXT_FRAMES).step


def host_file_dit(net: torch.nn.Module, cfg: WanDiTConfig, dtype: torch.dtype, key: str,
                  compile: bool | str = False) -> HostedWan:
    """Our own WanDiT (plain torch layers) under a ModelPatcher; loaded whole (it cannot be split like comfy ops)."""
    patcher = comfy_memory.managed(net, mm.get_torch_device(), mm.unet_offload_device())
    return HostedWan(net, cfg, patcher, dtype=dtype, key=key, full_load=True, work_bytes=work_bytes(cfg, dtype),
                     compile=compile)


# ------------------------------------------------------------------------------------------------ ImageReward
class HostedScorer:
    """ImageReward under a ModelPatcher; scoring loads it (only it) first."""

    def __init__(self, scorer: ImageRewardScorer, key: str, info: str):
        self.scorer, self.key, self.info = scorer, key, info
        self.patcher = comfy_memory.managed(scorer.model, mm.get_torch_device(), mm.unet_offload_device())

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        comfy_memory.load(self.patcher, force_full_load=True)
        with compiler_off():
            return self.scorer.score_frames(frames, prompt)


# ------------------------------------------------------------------------------------------------ the VAE
class HostedVAE:
    """SDVG's streaming Wan VAE (explicit, immutable decoder cache) built once from the weights of a ComfyUI VAE (Load
    VAE), loaded by ComfyUI before every decode/encode."""

    def __init__(self, vae: WanVAE, key: str):
        self.inner, self.key = vae, key
        self.patcher = comfy_memory.managed(vae, mm.vae_device(), mm.vae_offload_device())

    def ensure_loaded(self) -> None:
        comfy_memory.load(self.patcher, force_full_load=True)

    def decode_stream(self, *args, **kwargs):
        self.ensure_loaded()
        with compiler_off():
            return self.inner.decode_stream(*args, **kwargs)

    def encode_anchor_frame(self, *args, **kwargs):
        self.ensure_loaded()
        with compiler_off():
            return self.inner.encode_anchor_frame(*args, **kwargs)

    def encode_stream(self, *args, **kwargs):  # given pixels: a start image, a video to extend or restyle
        self.ensure_loaded()
        with compiler_off():
            return self.inner.encode_stream(*args, **kwargs)

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
