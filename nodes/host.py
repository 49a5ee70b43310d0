"""ComfyUI host glue: model folders, memory management, stable model keys, progress and Cancel.

Every model the engine calls lives under ComfyUI's memory manager (a ModelPatcher) and is loaded with
`load_models_gpu` right before it is used, one model at a time, so the 14B target and the 1.3B drafter are
never both forced onto a GPU that cannot hold them. Each hosted model has a stable `key` (file path + mtime +
dtype, or the ComfyUI model object + patch uuid) so the engine's shared memo survives node re-execution.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

import comfy.model_management as mm
import comfy.model_patcher
import comfy.utils
import folder_paths

from ..sdvg_core.models.wan_config import (
    INDISTINGUISHABLE_NOTE, WanDiTConfig, WrongWanModel, check_t2v, shape_signature,
)
from ..sdvg_core.engine.engine import Engine, EngineConfig, ProgressEvent
from ..sdvg_core.engine.memo import TieredMemo
from ..sdvg_core.models.reward import ImageRewardScorer
from ..sdvg_core.engine.state import GenerationState
from ..sdvg_core.models.vae import WanVAE
from ..sdvg_core.models.wan import CausalWan
from ..sdvg_core.engine.memory import GIB, check_fits, dit_memory, estimate_for_spec, MemoryEstimate

LOG = logging.getLogger("SDVG")

DIFFUSION_FOLDER = "diffusion_models"
REWARD_FOLDER = "image_reward"
PROMPTS_FOLDER = "sdvg_prompts"
REWARD_EXTENSIONS = {".pt", ".pth", ".safetensors"}
PROMPT_EXTENSIONS = {".safetensors"}

# Where each file comes from (named in every "not found" error and in the README).
SOURCES = {
    "drafter": "Self-Forcing (Wan 2.1 1.3B, block-causal): https://huggingface.co/gdhe17/Self-Forcing, file "
               "checkpoints/self_forcing_dmd.pt",
    "target": "Krea Realtime Video 14B (Wan 2.1 14B, block-causal): https://huggingface.co/krea/krea-realtime-video, "
              "file krea-realtime-video-14b.safetensors",
    "image_reward": "ImageReward v1.0: https://huggingface.co/THUDM/ImageReward, file ImageReward.pt, plus the BERT "
                    "vocabulary vocab.txt from https://huggingface.co/google-bert/bert-base-uncased next to it",
    "prompts": "the 'SDVG Save Prompt Embeddings' node, which writes it from a CLIP Text Encode output",
}

DEFAULT_CACHE_GB = 2.0
# One memo for every engine built by any node (keys hold model identities and lineages). Small entries (drafts,
# target blocks, scores) have their own 1 GB so a multi-GB KV/decoder cache never evicts them.
MEMO = TieredMemo(int(DEFAULT_CACHE_GB * 2**30))


class SDVGError(RuntimeError):
    """A user-facing error: what is wrong and how to fix it."""


# ------------------------------------------------------------------------------------------------ folders
def register_folders() -> None:
    """Add models/image_reward and models/sdvg_prompts through ComfyUI's public folder API (keeping yaml paths).

    Upstream ComfyUI (0.3.x) takes `add_model_folder_path(name, full_path)` and keeps the extensions in a mutable
    set; the pip-installable builds (0.12.x) take `extensions=` and place `models/<name>` under every base path
    themselves (their registry refuses `.get(name, default)` and item assignment puts folders outside models/).
    """
    add = folder_paths.add_model_folder_path
    try:
        takes_extensions = "extensions" in inspect.signature(add).parameters
    except (TypeError, ValueError):
        takes_extensions = False
    for name, exts in ((REWARD_FOLDER, REWARD_EXTENSIONS), (PROMPTS_FOLDER, PROMPT_EXTENSIONS)):
        if takes_extensions:
            add(name, extensions=set(exts))
        else:
            add(name, os.path.join(folder_paths.models_dir, name))
        # always (the 0.12 build too): when an extra_model_paths.yaml registered the folder first, that build keeps
        # the yaml entry's empty extension set (matching no file: empty combos), ignoring add(..., extensions=)
        folder_paths.folder_names_and_paths[name][1].update(exts)


def file_list(folder: str) -> list[str]:
    try:
        return folder_paths.get_filename_list(folder)
    except KeyError:
        return []


def missing_file_message(folder: str, name: str, what: str, source: str) -> str:
    """What to tell the user when a picked file is not in the folder: the folders searched, the files there, the source."""
    try:
        searched = [str(p) for p in folder_paths.get_folder_paths(folder)]
    except KeyError:
        searched = []
    present = file_list(folder)
    return (f"{what}: file {name!r} not found in models/{folder} (searched: {', '.join(searched) or 'no folder registered'}; "
            f"files there: {', '.join(present[:8]) or 'none'}). Get it from {source}, put it in one of those folders, "
            f"then press R in ComfyUI to refresh the file lists.")


def resolve_file(folder: str, name: str, what: str, source: str) -> str:
    """Full path of a file picked in a combo, or an error naming the folders searched and the file's source."""
    path = folder_paths.get_full_path(folder, name) if name else None
    if path is not None:
        return str(path)
    raise SDVGError(missing_file_message(folder, name, what, source))


def check_file(folder: str, name: str, what: str, source: str) -> bool | str:
    """For a loader's `validate_inputs`: True, or the pack's message. Newer ComfyUI checks combo values at /prompt
    ("Value not in list") unless the node validates the input itself, which would hide the folders and source."""
    if name and folder_paths.get_full_path(folder, name) is not None:
        return True
    return missing_file_message(folder, name, what, source)


# ------------------------------------------------------------------------------------------------ dtypes
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def auto_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs that have it, fp16 on other GPUs, fp32 on the CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type in ("mps", "xpu"):
        return torch.float16
    return torch.float32


def pick_dtype(option: str, device: torch.device) -> torch.dtype:
    return auto_dtype(device) if option == "auto" else DTYPES[option]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


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


# ------------------------------------------------------------------------------------------------ models
class _Holder(torch.nn.Module):
    """A plain parent module for ModelPatcher, which sets `.device` on the model (WanVAE has a read-only one)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner


def _patcher(module: torch.nn.Module, load_device, offload_device):
    holder = _Holder(module)
    return comfy.model_patcher.ModelPatcher(holder, load_device=load_device, offload_device=offload_device,
                                            size=mm.module_size(holder))


def comfy_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """ComfyUI's `optimized_attention` (sage / flash / xformers / PyTorch, per its launch flags) on q [B, N, Sq, D],
    k/v [B, N, Sk, D] -> [B, Sq, N*D]; looked up at call time, so it follows ComfyUI's current choice."""
    from comfy.ldm.modules import attention as comfy_attn

    return comfy_attn.optimized_attention(q, k, v, q.shape[1], skip_reshape=True)


# ComfyUI kernels worth routing SDVG's attention through (chosen by --use-sage-attention / --use-flash-attention /
# xformers). Its other choices are PyTorch SDPA itself (CausalWan's default) or the CPU/old-GPU fallbacks
# (attention_basic / sub_quad / split), which are slower than SDPA: SDVG keeps SDPA then.
COMFY_FAST_ATTENTION = ("attention_sage", "attention_flash", "attention_xformers")


def host_attention() -> Callable | None:
    """comfy_attention when ComfyUI was started with a dedicated attention kernel, else None (CausalWan's SDPA)."""
    try:
        from comfy.ldm.modules import attention as comfy_attn
    except ImportError:
        return None
    chosen = getattr(getattr(comfy_attn, "optimized_attention", None), "__name__", "")
    return comfy_attention if chosen in COMFY_FAST_ATTENTION else None


class HostedWan(CausalWan):
    """CausalWan whose every model call first asks ComfyUI to load this model (and only this one).

    `work_bytes` is what a call needs beside the weights (KV window, text K/V, activations): sized for Krea at
    832x480 at load time, then for the actual recipe window and size by `Session.reserve` at Start.
    """

    def __init__(self, net: torch.nn.Module, cfg: WanDiTConfig, patcher, *, dtype: torch.dtype, key: str,
                 full_load: bool, work_bytes: int = 0, compile: bool | str = False):
        super().__init__(net, cfg, dtype=dtype, device=patcher.load_device, key=key, attention_fn=host_attention(),
                         compile=compile)
        self.patcher, self.full_load, self.work_bytes = patcher, full_load, work_bytes

    def ensure_loaded(self) -> None:
        with own_load():
            mm.load_models_gpu([self.patcher], memory_required=self.work_bytes, force_full_load=self.full_load)

    def encode_text(self, *args, **kwargs):
        self.ensure_loaded()
        return super().encode_text(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self.ensure_loaded()
        return super().forward(*args, **kwargs)


@dataclass(frozen=True)
class DiTHandle:
    """What a loader node outputs (SDVG_MODEL): the hosted runner and a line saying what was loaded."""

    role: str  # drafter / target
    runner: HostedWan
    info: str

    @property
    def key(self) -> str:
        return self.runner.key


# The load-time reservation, until Start knows the recipe and size: Krea at 832x480 (1560 tokens per latent frame,
# a 6-frame window of 3-frame blocks, context rebuilt 3 frames at a time; sdvg_core/engine/recipes.py KreaRecipe).
DEFAULT_TOKENS_PER_FRAME, DEFAULT_WINDOW_FRAMES, DEFAULT_BLOCK_FRAMES, DEFAULT_CONTEXT_FRAMES = 1560, 6, 3, 3


def work_bytes(cfg: WanDiTConfig, dtype: torch.dtype) -> int:
    """Memory a model call needs beside the weights before Start sizes it (sdvg_core.engine.memory.dit_memory)."""
    return dit_memory(cfg, dtype, tokens_per_frame=DEFAULT_TOKENS_PER_FRAME, window_frames=DEFAULT_WINDOW_FRAMES,
                      frames_per_block=DEFAULT_BLOCK_FRAMES, context_frames=DEFAULT_CONTEXT_FRAMES).step


def host_file_dit(net: torch.nn.Module, cfg: WanDiTConfig, dtype: torch.dtype, key: str,
                  compile: bool | str = False) -> HostedWan:
    """Our own WanDiT (plain torch layers) under a ModelPatcher; loaded whole (it cannot be split like comfy ops)."""
    patcher = _patcher(net, mm.get_torch_device(), mm.unet_offload_device())
    return HostedWan(net, cfg, patcher, dtype=dtype, key=key, full_load=True, work_bytes=work_bytes(cfg, dtype),
                     compile=compile)


# ComfyUI's TorchCompileModel stores its torch.compile arguments here (comfy_api/torch_helpers/torch_compile.py) and
# compiles `diffusion_model` only inside `apply_model`, which SDVG never calls; SDVG honours the request instead by
# compiling its own block regions with the same backend.
COMFY_COMPILE_OPTION = "torch_compile_kwargs"


def comfy_compile_request(model: Any) -> str | None:
    """The torch.compile backend a TorchCompileModel node asked for on this MODEL, or None."""
    kwargs = (getattr(model, "model_options", None) or {}).get(COMFY_COMPILE_OPTION)
    return str(kwargs.get("backend") or "inductor") if isinstance(kwargs, dict) else None


def wan_config_from_module(net: torch.nn.Module, comfy_config: Any = None) -> WanDiTConfig:
    """The Wan 2.1 T2V config of a loaded network: ours (`.config`), ComfyUI's WanModel (attributes) or shapes.

    Any other Wan model (I2V, VACE, camera, S2V, Wan 2.2 5B...) is refused: checked on ComfyUI's model_config
    class and unet_config model_type (`comfy_config`), the network's model_type, parameter names and widths.
    """
    cfg = getattr(net, "config", None)
    if isinstance(cfg, WanDiTConfig):
        return cfg
    kind = type(net).__name__
    unet_config = getattr(comfy_config, "unet_config", None)
    model_type = unet_config.get("model_type") if isinstance(unet_config, dict) else None
    model_type = model_type or getattr(net, "model_type", None)
    if not hasattr(net, "blocks") or not hasattr(net, "head"):
        raise SDVGError(f"the MODEL input holds a {kind}, not a Wan 2.1 network. Load a Wan 2.1 text-to-video "
                        f"checkpoint (e.g. {SOURCES['target']}) with 'Load Diffusion Model' and connect it.")
    if all(hasattr(net, a) for a in ("dim", "ffn_dim", "num_heads", "num_layers", "in_dim", "out_dim")):
        p = getattr(net, "patch_size", (1, 2, 2))
        cfg = WanDiTConfig(name=f"comfy-{kind}-{net.dim}x{net.num_layers}", dim=int(net.dim), ffn_dim=int(net.ffn_dim),
                           num_heads=int(net.num_heads), num_layers=int(net.num_layers),
                           text_dim=int(getattr(net, "text_dim", 4096)), text_len=int(getattr(net, "text_len", 512)),
                           in_dim=int(net.in_dim), out_dim=int(net.out_dim), freq_dim=int(getattr(net, "freq_dim", 256)),
                           patch_size=tuple(int(v) for v in p), eps=float(getattr(net, "eps", 1e-6)),
                           qk_norm=bool(getattr(net, "qk_norm", True)),
                           cross_attn_norm=bool(getattr(net, "cross_attn_norm", True)))
    else:
        sig = shape_signature(net.state_dict())
        cfg = WanDiTConfig(name=f"comfy-{kind}-{sig['dim']}x{sig['num_layers']}", num_heads=sig["dim"] // 128, **sig)
    try:
        check_t2v([k for k, _ in net.named_parameters()], cfg.in_dim, cfg.out_dim, f"the MODEL input ({kind})",
                  model_type=model_type, config_class=None if comfy_config is None else type(comfy_config).__name__)
    except WrongWanModel as e:
        raise SDVGError(f"{e} Load a Wan 2.1 text-to-video checkpoint (e.g. {SOURCES['target']}) with 'Load "
                        f"Diffusion Model' and connect it. {INDISTINGUISHABLE_NOTE}") from e
    return cfg


class _Fp32Input(torch.nn.Module):
    """ComfyUI keeps Wan's patch embedding in fp32 and feeds it fp32 input (`patch_embedding(x.float())`)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.float()).to(x.dtype)


class _CastInput(torch.nn.Module):
    """Feed a ComfyUI layer its input in the compute dtype (its weights may not be cast for fp32 input)."""

    def __init__(self, inner: torch.nn.Module, dtype: torch.dtype):
        super().__init__()
        self.inner, self.dtype = inner, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(self.dtype))


class _View:
    """Attribute view of a module with a few children swapped; everything else is the original object."""

    def __init__(self, inner: Any, **swapped: Any):
        self._inner, self._swapped = inner, swapped

    def __getattr__(self, name: str) -> Any:
        swapped = self.__dict__.get("_swapped", {})
        if name in swapped:
            return swapped[name]
        if "_inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_inner"], name)


def comfy_wan_view(net: torch.nn.Module, dtype: torch.dtype) -> Any:
    """ComfyUI's WanModel as CausalWan sees it: fp32 patch embedding and norm3 fed in the compute dtype.

    CausalWan keeps the residual stream in fp32; ComfyUI's layers with non-fp32 weights (not manual-cast) would
    refuse fp32 input, so the two layers that receive the raw residual/latents get an adapter.
    """
    blocks = [_View(b, norm3=_CastInput(b.norm3, dtype)) for b in net.blocks]
    return _View(net, patch_embedding=_Fp32Input(net.patch_embedding), blocks=blocks)


def host_comfy_model(model: Any, role: str, compile: bool | str = False) -> DiTHandle:
    """Wrap a ComfyUI MODEL (UNETLoader, GGUF, LoRA-patched...) holding a Wan 2.1 T2V network.

    A TorchCompileModel upstream turns on SDVG's regional compile with its backend (see COMFY_COMPILE_OPTION).
    """
    base = getattr(model, "model", None)
    net = getattr(base, "diffusion_model", None)
    if net is None:
        raise SDVGError(f"the MODEL connected to the SDVG {role} loader is a {type(model).__name__} without "
                        f"`model.diffusion_model`; connect the output of 'Load Diffusion Model' (UNETLoader).")
    cfg = wan_config_from_module(net, getattr(base, "model_config", None))
    weight = base.get_dtype() if hasattr(base, "get_dtype") else next(net.parameters()).dtype
    dtype = getattr(base, "manual_cast_dtype", None) or weight
    if dtype not in DTYPES.values():
        dtype = auto_dtype(torch.device(model.load_device))
    key = f"comfy|{object_token(base)}|{getattr(model, 'patches_uuid', '')}|{dtype_name(dtype)}"
    view = net if isinstance(getattr(net, "config", None), WanDiTConfig) else comfy_wan_view(net, dtype)
    compile = comfy_compile_request(model) or compile
    runner = HostedWan(view, cfg, model, dtype=dtype, key=key, full_load=False, work_bytes=work_bytes(cfg, dtype),
                       compile=compile)
    info = (f"{role}: ComfyUI MODEL ({type(net).__name__}, dim {cfg.dim}, {cfg.num_layers} layers, weights "
            f"{dtype_name(weight)}, compute {dtype_name(dtype)})")
    return DiTHandle(role, runner, info)


# ------------------------------------------------------------------------------------------------ VAE
class HostedVAE:
    """Our streaming Wan VAE (explicit immutable decoder cache) built from a ComfyUI VAE's weights."""

    def __init__(self, vae: WanVAE, key: str):
        self.inner, self.key = vae, key
        self.patcher = _patcher(vae, mm.vae_device(), mm.vae_offload_device())

    def ensure_loaded(self) -> None:
        with own_load():
            mm.load_models_gpu([self.patcher], force_full_load=True)

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
    hosted = _VAES[comfy_vae] = HostedVAE(ours, f"vae|{object_token(comfy_vae)}|{dtype_name(dtype)}")
    return hosted


# ------------------------------------------------------------------------------------------------ ImageReward
class HostedScorer:
    """ImageReward under a ModelPatcher; scoring loads it (only it) first."""

    def __init__(self, scorer: ImageRewardScorer, key: str, info: str):
        self.scorer, self.key, self.info = scorer, key, info
        self.patcher = _patcher(scorer.model, mm.get_torch_device(), mm.unet_offload_device())

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        with own_load():
            mm.load_models_gpu([self.patcher], force_full_load=True)
        return self.scorer.score_frames(frames, prompt)


# ------------------------------------------------------------------------------------------------ session / state
@dataclass(frozen=True)
class Session:
    """Everything a generation needs besides its state: models, VAE, scorer, engine options."""

    target: DiTHandle
    drafter: DiTHandle | None
    vae: HostedVAE
    scorer: HostedScorer | None
    config: EngineConfig

    def engine(self, progress: Callable[[ProgressEvent], None] | None = None, memo: TieredMemo | None = None) -> Engine:
        """A light Engine over the shared memo (or `memo`: a private one for a fresh run), with ComfyUI's Cancel as
        interrupt callback and the current execution's id as run id."""
        e = Engine(self.target.runner, self.vae, self.drafter.runner if self.drafter else None, self.scorer,
                   self.config, memo=MEMO if memo is None else memo)
        e.callbacks.interrupt = mm.throw_exception_if_processing_interrupted
        e.callbacks.progress = progress
        e.callbacks.run_id = current_run_id()
        return e

    def reserve(self, spec) -> MemoryEstimate:
        """Size each DiT's per-call reservation for this spec's recipe window and size, and refuse, before any work,
        a size whose estimated peak exceeds the device's memory (MemoryRefused names the estimate and the limit).

        Weights of ComfyUI-managed MODELs are not counted (ComfyUI can stream them in low-VRAM mode).
        """
        handles = [h for h in (self.target, self.drafter) if h is not None]
        vae = self.vae.inner
        est = estimate_for_spec(spec, self.config.recipe, [(h.runner.cfg, h.runner.dtype) for h in handles],
                                vae.config, vae.dtype, vae_weight_bytes=mm.module_size(vae))
        for h, d in zip(handles, est.dits):
            h.runner.work_bytes = d.step
        counted = MemoryEstimate(tuple(d if h.runner.full_load else dataclasses.replace(d, weights=0)
                                       for h, d in zip(handles, est.dits)), est.vae_weights, est.vae_cache,
                                 est.vae_activations)
        device = handles[0].runner.device
        total = getattr(mm, "get_total_memory", None)
        if total is not None:
            check_fits(counted, int(total(device)), f"{device} (ComfyUI's total for it)")
        LOG.info("SDVG memory estimate: %s", counted.describe())
        return counted


# ------------------------------------------------------------------------------------------------ memo vs ComfyUI
ALL_MEMORY = 1e30  # what ComfyUI's unload_all_models asks free_memory for
def release_memo_caches() -> int:
    """Drop the shared memo's big entries (KV and decoder caches, up to cache_gb); returns the bytes dropped.

    They are derived data: a later run recomputes what it needs. Tensors still referenced by a live run stay alive.
    """
    dropped = MEMO.large.bytes + MEMO.large.pinned_bytes
    MEMO.large.clear()
    return dropped


_OWN_LOADS = [0]  # > 0 while SDVG itself loads one of its models (its caches are then in use, not to be dropped)


@contextlib.contextmanager
def own_load():
    """Mark a load_models_gpu call made by SDVG between its own model calls (model swaps inside a generation)."""
    _OWN_LOADS[0] += 1
    try:
        yield
    finally:
        _OWN_LOADS[0] -= 1


def _memo_aware_free_memory(original: Callable) -> Callable:
    """Wrap ComfyUI's `free_memory` so that when it must make room for something else (another model loads,
    Unload Models, `unload_all_models`), SDVG's cached KV/decoder tensors go first, then ComfyUI unloads models as
    usual. SDVG's own model swaps inside a generation keep the caches (the running generation reads them)."""

    def free_memory(memory_required, device, keep_loaded=[]):  # noqa: B006 (ComfyUI's signature)
        external = _OWN_LOADS[0] == 0 or memory_required >= ALL_MEMORY
        if external and MEMO.large.bytes + MEMO.large.pinned_bytes > 0:
            free = mm.get_free_memory(device) if hasattr(mm, "get_free_memory") else 0
            if memory_required > free:
                dropped = release_memo_caches()
                mm.soft_empty_cache()
                LOG.info("SDVG: released %.2f GiB of cached KV/decoder tensors for ComfyUI", dropped / GIB)
        return original(memory_required, device, keep_loaded)

    free_memory.sdvg_wrapped = original
    return free_memory


def hook_free_memory() -> None:
    """Install the wrapper once (ComfyUI's own callers look `free_memory` up in its module at call time)."""
    if hasattr(mm, "free_memory") and not hasattr(mm.free_memory, "sdvg_wrapped"):
        mm.free_memory = _memo_aware_free_memory(mm.free_memory)


hook_free_memory()


_FALLBACK_RUN_ID = uuid.uuid4().hex


def show_text(text: str) -> None:
    """Draw `text` on the node running now (frontends >= 1.2x show progress text on the node; for the loop's
    expanded copies the text goes to the node the user placed, whose id ends the copy's id). No-op elsewhere."""
    try:
        from comfy_execution.utils import get_executing_context
        from server import PromptServer
    except ImportError:
        return
    ctx = get_executing_context()
    server = getattr(PromptServer, "instance", None)
    if ctx is None or server is None or not hasattr(server, "send_progress_text"):
        return
    try:
        server.send_progress_text(text, str(ctx.node_id).rsplit(".", 1)[-1])
    except Exception as e:  # display only: never fail a generation over it
        LOG.debug("SDVG: progress text not sent: %s", e)


def current_run_id() -> str:
    """The id of the ComfyUI execution running now (its prompt id): every block a node computes is stamped with it,
    so SDVG Finish can tell blocks computed by this queue press from blocks taken from ComfyUI's node cache (an
    earlier press). Outside an execution (no context): one id per process."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return _FALLBACK_RUN_ID
    ctx = get_executing_context()
    return str(ctx.prompt_id) if ctx is not None and getattr(ctx, "prompt_id", None) else _FALLBACK_RUN_ID


@dataclass(frozen=True)
class Run:
    """The SDVG_STATE value passed between nodes: the session plus an immutable GenerationState."""

    session: Session
    state: GenerationState
    tau: float | None = None  # the tau of the last routing decision (for the report plot)
    policy: str = ""  # description of the routing policy used

    def with_state(self, state: GenerationState, **kw: Any) -> "Run":
        return Run(self.session, state, kw.get("tau", self.tau), kw.get("policy", self.policy))


def set_cache_budget(gb: float) -> None:
    """Budget of the shared memo's big entries (KV and decoder caches), set from the Start/Generate nodes."""
    MEMO.resize(int(gb * 2**30))


# ------------------------------------------------------------------------------------------------ progress
def to_pil(frame: torch.Tensor):
    """[H, W, 3] 0..1 -> PIL image (truncating, as ComfyUI's savers do)."""
    from PIL import Image

    return Image.fromarray((frame.detach().float().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy())


class BlockProgress:
    """ComfyUI progress bar over model calls, with the newest committed frame as preview per block."""

    def __init__(self, num_blocks: int, steps_per_block: int, first_block: int = 0):
        self.steps = max(steps_per_block, 1)
        self.first = first_block
        self.total = max(num_blocks - first_block, 1) * self.steps
        self.bar = comfy.utils.ProgressBar(self.total)
        self.value = 0

    def __call__(self, ev: ProgressEvent) -> None:
        base = (ev.block - self.first) * self.steps
        if ev.kind == "step":
            value = base + min(ev.step, self.steps - 1)
            preview = None
        else:
            value = base + self.steps
            preview = ("JPEG", to_pil(ev.preview), 512) if ev.preview is not None else None
        self.value = max(self.value, value)
        self.bar.update_absolute(self.value, self.total, preview)


def to_image_batch(img) -> torch.Tensor:
    """PIL image -> ComfyUI IMAGE [1, H, W, 3] float 0..1."""
    import numpy as np

    return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0)[None]


# ------------------------------------------------------------------------------------------------ starting a run
def conditioning_embeddings(conditioning: Any) -> tuple[torch.Tensor, str]:
    """CONDITIONING [[tensor [1, L, D], {...}], ...] -> (embeddings of the first entry, prompt text if it carries one)."""
    try:
        cond, extra = conditioning[0][0], conditioning[0][1]
    except (TypeError, IndexError, KeyError) as e:
        raise SDVGError("the conditioning input is empty or not ComfyUI CONDITIONING; connect CLIP Text Encode "
                        "(with a 'wan' CLIP loader) or SDVG Load Prompt Embeddings") from e
    if len(conditioning) > 1:
        LOG.warning("SDVG: the conditioning holds %d prompts; only the first is used", len(conditioning))
    if not isinstance(cond, torch.Tensor) or cond.dim() != 3:
        raise SDVGError(f"the conditioning tensor must be [1, L, 4096] umT5 embeddings, got {type(cond).__name__} "
                        f"{list(getattr(cond, 'shape', []))}")
    return cond[:1].float().cpu(), str((extra or {}).get("sdvg_prompt", ""))
