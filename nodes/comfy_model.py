"""Adapting a ComfyUI MODEL (Load Diffusion Model, GGUF and LoRA loaders, TorchCompileModel) to SDVG's DiT dit:
recognising a Wan 2.1 text-to-video network, reading its shape, and feeding ComfyUI's layers the dtypes they take."""
from __future__ import annotations

from typing import Any

import torch

from ..sdvg_core.engine.report import DEFAULT_COMPILE_BACKEND
from ..sdvg_core.models.wan_config import (
    INDISTINGUISHABLE_NOTE, WanDiTConfig, WrongWanModel, check_t2v, shape_signature,
)
from .folders import SOURCES
from .hosted import DTYPES, DiTHandle, HostedWan, auto_dtype, dtype_name, object_token, work_bytes
from .surface import SDVGError

# ComfyUI's TorchCompileModel stores its torch.compile arguments here (comfy_api/torch_helpers/torch_compile.py) and
# compiles `diffusion_model` only inside `apply_model`, which SDVG never calls; SDVG honours the request instead by
# compiling its whole transformer block (CausalWan(compile=backend)) with the same backend.
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

    A TorchCompileModel upstream turns on SDVG's whole-block compile with its backend (see COMFY_COMPILE_OPTION).
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
    compile = comfy_compile_request(model) or compile
    key = f"comfy|{object_token(base)}|{getattr(model, 'patches_uuid', '')}|{dtype_name(dtype)}"
    if compile:  # a compiled model may round differently: its derived data is kept apart (as the file loaders do)
        key += f"|compiled:{DEFAULT_COMPILE_BACKEND if compile is True else compile}"
    view = net if isinstance(getattr(net, "config", None), WanDiTConfig) else comfy_wan_view(net, dtype)
    dit = HostedWan(view, cfg, model, dtype=dtype, key=key, full_load=False, work_bytes=work_bytes(cfg, dtype),
                       compile=compile)
    info = (f"{role}: ComfyUI MODEL ({type(net).__name__}, dim {cfg.dim}, {cfg.num_layers} layers, weights "
            f"{dtype_name(weight)}, compute {dtype_name(dtype)})" + (", compiled" if compile else ""))
    return DiTHandle(role, dit, info)
