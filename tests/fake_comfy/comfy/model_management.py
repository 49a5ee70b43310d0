"""Fake memory manager: CPU only; keeps ComfyUI's list of loaded models and frees them the way ComfyUI does.

Like ComfyUI 0.3.64 (and the 0.12 pip build): `load_models_gpu` wraps each patcher in a `LoadedModel`, first takes
models being loaded out of `current_loaded_models` (`detach(unpatch_all=False)`), frees memory for them on their
device, then loads them and puts them first in the list. `free_memory` walks the other loaded models of the device
(least offloaded first) and asks each to free what is still missing: `partially_unload(offload_device, n)`, and
when that is not enough `detach()` and drop it from the list. `unload_all_models` is `free_memory(1e30, device)`.
Like 0.33 (Dynamic VRAM): a load call frees "for dynamic" only when every model in it is dynamic (`is_dynamic()`),
and then leaves the other dynamic models loaded (they stream on demand); every non-dynamic model's size is
pinned-RAM demand (`pins_required`; the fake records it, it has no pinned memory to evict).
Tests set FAKE_FREE_BYTES (what the device has free) and FAKE_TOTAL_BYTES; records the load calls and interrupt.
"""
from __future__ import annotations

import sys
import weakref

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
FREE_CALLS: list[tuple[float, str, bool, int]] = []  # (memory_required, device, for_dynamic, pins_required) per call


def get_free_memory(dev=None, torch_free_too: bool = False):
    return (FAKE_FREE_BYTES, FAKE_FREE_BYTES) if torch_free_too else FAKE_FREE_BYTES


def get_total_memory(dev=None, torch_total_too: bool = False):
    return (FAKE_TOTAL_BYTES, FAKE_TOTAL_BYTES) if torch_total_too else FAKE_TOTAL_BYTES


current_loaded_models: list["LoadedModel"] = []


class LoadedModel:
    """A loaded patcher (held weakly, as ComfyUI does) and its device."""

    def __init__(self, model):
        self._model = weakref.ref(model)
        self.device = model.load_device
        self.currently_used = True

    @property
    def model(self):
        return self._model()

    def model_memory(self) -> int:
        return self.model.model_size()

    def model_loaded_memory(self) -> int:
        return self.model.loaded_size()

    def model_offloaded_memory(self) -> int:
        return self.model.model_size() - self.model.loaded_size()

    def model_memory_required(self, device) -> int:
        return self.model_offloaded_memory() if device == self.model.current_loaded_device() else self.model_memory()

    def model_load(self, lowvram_model_memory=0, force_patch_weights=False):
        self.model.model_patches_to(self.device)
        self.model.partially_load(self.device, lowvram_model_memory or 1e32, force_patch_weights=force_patch_weights)
        return self.model.model

    def model_unload(self, memory_to_free=None, unpatch_weights=True) -> bool:
        if memory_to_free is not None and memory_to_free < self.model.loaded_size():
            freed = self.model.partially_unload(self.model.offload_device, memory_to_free)
            if freed >= memory_to_free:
                return False
        self.model.detach(unpatch_weights)
        return True

    def __eq__(self, other) -> bool:
        return self.model is other.model


def free_memory(memory_required, device, keep_loaded=[], for_dynamic=False, pins_required=0, ram_required=0):  # noqa: B006
    FREE_CALLS.append((memory_required, str(device), for_dynamic, pins_required))
    can_unload = []
    for i in range(len(current_loaded_models) - 1, -1, -1):
        m = current_loaded_models[i]
        if m.device == device and m not in keep_loaded and m.model is not None:
            can_unload.append((-m.model_offloaded_memory(), sys.getrefcount(m.model), m.model_memory(), i))
    unloaded = []
    for *_, i in sorted(can_unload):
        free = get_free_memory(device)
        if for_dynamic and current_loaded_models[i].model.is_dynamic():
            memory_required -= current_loaded_models[i].model.loaded_size()  # streams on demand: not unloaded
            continue
        if free > memory_required:
            break
        if current_loaded_models[i].model_unload(memory_required - free):
            unloaded.append(i)
    return [current_loaded_models.pop(i) for i in sorted(unloaded, reverse=True)]


def load_models_gpu(models, memory_required: int = 0, force_patch_weights: bool = False,
                    minimum_memory_required=None, force_full_load: bool = False) -> None:
    LOAD_CALLS.append(list(models))
    to_load = []
    for x in models:
        lm = LoadedModel(x)
        to_load.append(current_loaded_models[current_loaded_models.index(lm)] if lm in current_loaded_models else lm)
    for lm in to_load:  # a model being loaded is taken out of the list first (re-inserted below)
        for i in [i for i, c in enumerate(current_loaded_models) if lm.model.is_clone(c.model)][::-1]:
            current_loaded_models.pop(i).model.detach(unpatch_all=False)
    need = sum(lm.model_memory_required(lm.device) for lm in to_load)
    pins = sum(lm.model_memory() for lm in to_load if not lm.model.is_dynamic())
    # the fake's device is the CPU, but ComfyUI frees here
    free_memory(need + memory_required, get_torch_device(), for_dynamic=all(x.is_dynamic() for x in models),
                pins_required=pins)
    for lm in to_load:
        lm.model_load(0, force_patch_weights)
        current_loaded_models.insert(0, lm)


def load_model_gpu(model) -> None:
    load_models_gpu([model])


def unload_all_models() -> None:
    free_memory(1e30, get_torch_device())
