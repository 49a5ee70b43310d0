"""Fake memory manager: CPU only; records which models were asked to load, and an interrupt flag."""
from __future__ import annotations

import torch

LOAD_CALLS: list[list] = []  # one entry per load_models_gpu call: the patchers passed
_interrupted = False


class InterruptProcessingException(Exception):
    pass


def get_torch_device() -> torch.device:
    return torch.device("cpu")


def unet_offload_device() -> torch.device:
    return torch.device("cpu")


def intermediate_device() -> torch.device:
    return torch.device("cpu")


def vae_device() -> torch.device:
    return torch.device("cpu")


def vae_offload_device() -> torch.device:
    return torch.device("cpu")


def text_encoder_device() -> torch.device:
    return torch.device("cpu")


def module_size(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def load_models_gpu(models, memory_required: int = 0, force_patch_weights: bool = False,
                    minimum_memory_required=None, force_full_load: bool = False) -> None:
    LOAD_CALLS.append(list(models))
    for m in models:
        m.loaded = True
        m.model.device = m.load_device  # as ComfyUI does after loading (fails on modules with a read-only .device)


def load_model_gpu(model) -> None:
    load_models_gpu([model])


def soft_empty_cache(force: bool = False) -> None:
    return None


def interrupt_current_processing(value: bool = True) -> None:
    global _interrupted
    _interrupted = value


def processing_interrupted() -> bool:
    return _interrupted


def throw_exception_if_processing_interrupted() -> None:
    global _interrupted
    if _interrupted:
        _interrupted = False
        raise InterruptProcessingException()
