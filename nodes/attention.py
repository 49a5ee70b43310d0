"""Attention routing: SDVG's DiT attention goes through ComfyUI's kernel when ComfyUI (or the MODEL) chose a dedicated
one, and stays on PyTorch SDPA (CausalWan's own) otherwise. Every backend a host can select is listed here as routed
or declined, with the reason; a backend this table does not know is declined with a warning (its numerics unchecked).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch

LOG = logging.getLogger("SDVG")

# ComfyUI's attention functions (comfy/ldm/modules/attention.py, 0.3.64 to 0.33.0), by the name of the function its
# launch flags make `optimized_attention`: routed ones are dedicated kernels worth calling; the declined ones are
# PyTorch SDPA itself (what CausalWan calls) or the CPU / old-GPU fallbacks, which compute the same attention slower
# than SDPA (tests/comfy_attention_probe.py measures each one that runs on the CPU against SDPA).
ROUTED = {
    "attention_sage": "--use-sage-attention (SageAttention 2, INT8 Q/K)",
    "attention3_sage": "SageAttention 3 (Blackwell FP4)",
    "attention_flash": "--use-flash-attention (flash-attn)",
    "attention_xformers": "xformers (installed and not disabled)",
    "attention_comfy_kitchen_int8": "--use-ck-attention (comfy kitchen INT8 attention, 0.33; CUDA only)",
}
DECLINED = {
    "attention_pytorch": "PyTorch SDPA: the kernel CausalWan already calls",
    "attention_basic": "einsum + softmax fallback: same result, slower and more memory than SDPA",
    "attention_sub_quad": "--use-quad-cross-attention / no-SDPA fallback: chunked, slower than SDPA",
    "attention_split": "--use-split-cross-attention: sliced, slower than SDPA",
}
# routed kernels that take no mask: flash-attn has none (ComfyUI logs a warning and falls back to SDPA on every masked
# call), so SDVG gives them only its unmasked calls and runs a masked one (a KV cache span still filling) on SDPA
NO_MASK = {"attention_flash"}
# where a ComfyUI MODEL carries its own choice (0.33's Model Attention Backend node, ModelPatcher.set_model_optimized_attention)
OVERRIDE_KEY = "optimized_attention_override"
_WARNED: set[str] = set()


def comfy_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                    transformer_options: dict | None = None) -> torch.Tensor:
    """ComfyUI's `optimized_attention` (per its launch flags, or the MODEL's own override when `transformer_options`
    carries one) on q [B, N, Sq, D], k/v [B, N, Sk, D] -> [B, Sq, N*D]; looked up at call time. `mask`: CausalWan's
    additive [1, 1, 1, Sk] mask of a KV span's empty slots (every ComfyUI backend takes it as `mask`: applied, or
    handed to PyTorch SDPA)."""
    from comfy.ldm.modules import attention as comfy_attn

    extra = {"transformer_options": transformer_options} if transformer_options else {}
    if mask is not None:
        extra["mask"] = mask
    return comfy_attn.optimized_attention(q, k, v, q.shape[1], skip_reshape=True, **extra)


def comfy_attention_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`comfy_attention` for a kernel that takes no mask (NO_MASK): no `mask` keyword, so CausalWan never gives it a
    masked call."""
    return comfy_attention(q, k, v)


def chosen_backend() -> str | None:
    """The name of the function ComfyUI made `optimized_attention`, None outside ComfyUI."""
    try:
        from comfy.ldm.modules import attention as comfy_attn
    except ImportError:
        return None
    return getattr(getattr(comfy_attn, "optimized_attention", None), "__name__", "") or None


def routing(model: Any = None) -> tuple[str, str]:
    """("routed" | "declined", why) for the host's current choice, or the MODEL's own override."""
    options = (getattr(model, "model_options", None) or {}).get("transformer_options") or {}
    if OVERRIDE_KEY in options:
        return "routed", "the MODEL's own attention choice (Model Attention Backend)"
    name = chosen_backend()
    if name is None:
        return "declined", "not inside ComfyUI"
    if name in ROUTED:
        return "routed", ROUTED[name]
    if name in DECLINED:
        return "declined", DECLINED[name]
    return "declined", f"unknown ComfyUI attention backend {name!r}: not routed until its numerics are checked"


def host_attention(model: Any = None) -> Callable | None:
    """The attention CausalWan should call for this MODEL (or a pack-loaded model when None): comfy_attention when
    ComfyUI's choice is routed, else None (CausalWan's SDPA)."""
    decision, why = routing(model)
    if decision == "declined":
        if why.startswith("unknown") and why not in _WARNED:
            _WARNED.add(why)
            LOG.warning("SDVG: %s; SDVG uses PyTorch SDPA", why)
        return None
    options = (getattr(model, "model_options", None) or {}).get("transformer_options") or {}
    if OVERRIDE_KEY not in options:
        return comfy_attention_unmasked if chosen_backend() in NO_MASK else comfy_attention

    def model_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor | None = None) -> torch.Tensor:
        return comfy_attention(q, k, v, mask, options)

    model_attention.__name__ = "comfy_attention_model_override"
    return model_attention
