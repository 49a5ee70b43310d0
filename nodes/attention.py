"""Attention routing: SDVG's DiT attention goes through ComfyUI's kernel only when ComfyUI chose a dedicated one."""
from __future__ import annotations

from typing import Callable

import torch

# ComfyUI kernels worth routing SDVG's attention through (chosen by --use-sage-attention / --use-flash-attention /
# xformers). Its other choices are PyTorch SDPA itself (CausalWan's default) or the CPU/old-GPU fallbacks
# (attention_basic / sub_quad / split), which are slower than SDPA: SDVG keeps SDPA then.
COMFY_FAST_ATTENTION = ("attention_sage", "attention_flash", "attention_xformers")


def comfy_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """ComfyUI's `optimized_attention` (sage / flash / xformers / PyTorch, per its launch flags) on q [B, N, Sq, D],
    k/v [B, N, Sk, D] -> [B, Sq, N*D]; looked up at call time, so it follows ComfyUI's current choice."""
    from comfy.ldm.modules import attention as comfy_attn

    return comfy_attn.optimized_attention(q, k, v, q.shape[1], skip_reshape=True)


def host_attention() -> Callable | None:
    """comfy_attention when ComfyUI was started with a dedicated attention kernel, else None (CausalWan's SDPA)."""
    try:
        from comfy.ldm.modules import attention as comfy_attn
    except ImportError:
        return None
    chosen = getattr(getattr(comfy_attn, "optimized_attention", None), "__name__", "")
    return comfy_attention if chosen in COMFY_FAST_ATTENTION else None
