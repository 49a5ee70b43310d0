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
    free_memory(memory_required, get_torch_device())  # as ComfyUI does before loading (looked up at call time)
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


# Memory accounting (ComfyUI: get_free_memory / get_total_memory / free_memory / unload_all_models); tests set these.
FAKE_FREE_BYTES = 1 << 40
FAKE_TOTAL_BYTES = 1 << 40
FREE_CALLS: list[tuple[float, str]] = []  # (memory_required, device) per free_memory call


def get_free_memory(dev=None, torch_free_too: bool = False):
    return (FAKE_FREE_BYTES, FAKE_FREE_BYTES) if torch_free_too else FAKE_FREE_BYTES


def get_total_memory(dev=None, torch_total_too: bool = False):
    return (FAKE_TOTAL_BYTES, FAKE_TOTAL_BYTES) if torch_total_too else FAKE_TOTAL_BYTES


def free_memory(memory_required, device, keep_loaded=[]):  # noqa: B006 (ComfyUI's signature)
    FREE_CALLS.append((memory_required, str(device)))
    return []


def unload_all_models() -> None:
    free_memory(1e30, get_torch_device())
