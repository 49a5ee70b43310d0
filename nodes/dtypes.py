"""Which dtype a model computes in: the loaders' dtype options and the automatic choice per device."""
from __future__ import annotations

import torch

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


def reward_dtype(option: str, device: torch.device) -> torch.dtype:
    """ImageReward's backbone dtype: auto is fp16 on accelerators (0.9 GB), fp32 on the CPU (1.8 GB)."""
    if option != "auto":
        return DTYPES[option]
    return DTYPES["fp16"] if device.type != "cpu" else DTYPES["fp32"]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
