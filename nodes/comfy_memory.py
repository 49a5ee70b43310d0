"""SDVG inside ComfyUI's memory manager, through the seam ComfyUI offers every model pack.

Each model SDVG calls is a `ModelPatcher` loaded with `load_models_gpu` right before it is used, one model at a time
(the 14B target and the 1.3B drafter are never both forced onto a GPU that cannot hold them). The shared memo is one
more loaded model: `MemoPatcher`, a ModelPatcher whose size is the memo's bytes. ComfyUI keeps it in
`current_loaded_models` like any model and frees it with its own logic: when something else needs the memory,
`free_memory` asks it to `partially_unload` (the memo evicts its least-recently-used entries) or `detach`es it (the
memo drops everything); Unload Models, `/free` and the out-of-memory handler reach it through `unload_all_models`.
Nothing of ComfyUI is replaced or wrapped (docs/design.md §4.1). SDVG loads each model together with the memo, so
its own swaps inside a generation (target <-> drafter <-> VAE) never evict the caches that generation reads.

Under Dynamic VRAM (ComfyUI 0.33 on NVIDIA: `ModelPatcherDynamic`, weights streamed in per module) ComfyUI treats a
load call differently when any model in it is not dynamic: it frees VRAM the non-dynamic way (other dynamic models
are unloaded instead of streaming on demand) and counts every non-dynamic model's bytes as pinned-RAM demand
(`ensure_pin_budget`, which may evict other models' pinned host memory). The memo is not dynamic and pins nothing, so
(1) it reports no size to the load call it is registered by (its entries are already where they live: loading it
needs no memory and no pin), and (2) a dynamic model is loaded alone, the memo registered in a call of its own when it
is not registered; in that load ComfyUI may ask the memo for memory like any non-dynamic model, and it yields its
reusable budget but not what the running generation holds (in SDVG's other loads it yields nothing).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch

import comfy.model_management as mm
import comfy.model_patcher

from . import shared_memo

LOG = logging.getLogger("SDVG")


class _Holder(torch.nn.Module):
    """A plain parent module for ModelPatcher, which sets `.device` on the model (WanVAE has a read-only one)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner


def managed(module: torch.nn.Module, load_device, offload_device):
    """`module` under a ComfyUI ModelPatcher (its weights are then loaded and offloaded by ComfyUI)."""
    holder = _Holder(module)
    return comfy.model_patcher.ModelPatcher(holder, load_device=load_device, offload_device=offload_device,
                                            size=mm.module_size(holder))


_OWN_LOADS: list[bool] = []  # one entry per SDVG load in progress: whether the memo may yield its reusable budget


@contextlib.contextmanager
def own_load(yield_budget: bool = False) -> Iterator[None]:
    """Mark a load_models_gpu call made by SDVG between its own model calls (model swaps inside a generation): the
    memo drops nothing then, except, with `yield_budget` (a dynamic model's load, where ComfyUI may ask the registered
    memo for memory), its reusable budget; what the running generation holds always stays."""
    _OWN_LOADS.append(yield_budget)
    try:
        yield
    finally:
        _OWN_LOADS.pop()


def in_own_load() -> bool:
    return bool(_OWN_LOADS)


def keeps_everything() -> bool:
    """Inside an SDVG load that must not drop any memo entry."""
    return bool(_OWN_LOADS) and not _OWN_LOADS[-1]


class SDVGCache(torch.nn.Module):
    """What the memo's patcher holds as its model: no weights. ComfyUI logs loaded models by this class name."""


class MemoPatcher(comfy.model_patcher.ModelPatcher):
    """The shared memo as a model ComfyUI manages: size = the memo's bytes, unloading = the memo's own eviction.

    Only the memory-accounting methods are overridden, each taking whatever arguments the host passes (the builds
    differ: 0.12 adds `force_patch_weights` to partially_unload), and everything else is ComfyUI's ModelPatcher.
    """

    def __init__(self, memo, device: torch.device):
        self.memo = memo
        self._registering = False
        super().__init__(SDVGCache(), load_device=device, offload_device=device)

    @contextlib.contextmanager
    def registering(self) -> Iterator["MemoPatcher"]:
        """While a load_models_gpu call that holds the memo runs: it needs no memory and pins nothing (0.33 counts a
        non-dynamic model's size as pinned-RAM demand), so it reports size 0 to that call."""
        self._registering = True
        try:
            yield self
        finally:
            self._registering = False

    def model_size(self, *args: Any, **kwargs: Any) -> int:
        return 0 if self._registering else shared_memo.memo_bytes(self.memo)

    def loaded_size(self, *args: Any, **kwargs: Any) -> int:
        return self.model_size()

    def current_loaded_device(self, *args: Any, **kwargs: Any):
        return self.load_device  # the memo's tensors stay where they were computed: always "loaded"

    def partially_load(self, *args: Any, **kwargs: Any) -> int:
        return 0  # nothing to move in: entries are made on the device by the model calls

    def partially_unload(self, device_to=None, memory_to_free=0, *args: Any, **kwargs: Any) -> int:
        """ComfyUI needs `memory_to_free` bytes: evict least-recently-used entries; during SDVG's own loads nothing
        goes, except in a dynamic model's load the reusable budget (never what the running generation holds)."""
        if not memory_to_free or keeps_everything():
            return 0
        freed = shared_memo.evict(int(memory_to_free), self.memo, keep_held=in_own_load())
        LOG.info("SDVG: released %.2f GiB of cached results for ComfyUI", freed / shared_memo.GIB)
        return freed

    def detach(self, *args: Any, **kwargs: Any):
        """ComfyUI unloads the memo (`unpatch_all` true: free_memory, unload_all_models): drop every entry (during
        SDVG's own loads nothing; in a dynamic model's load the reusable budget only). With `unpatch_all` false
        ComfyUI is only re-registering it for a load: keep everything."""
        unpatch_all = kwargs.get("unpatch_all", args[0] if args else True)
        if unpatch_all and keeps_everything():
            pass
        elif unpatch_all and in_own_load():
            shared_memo.evict(shared_memo.memo_bytes(self.memo), self.memo, keep_held=True)
        elif unpatch_all:
            shared_memo.drop_all(self.memo)
        return super().detach(*args, **kwargs)


def is_dynamic(patcher) -> bool:
    """Whether ComfyUI streams this model's weights in on demand (0.33's Dynamic VRAM; False on older hosts)."""
    check = getattr(patcher, "is_dynamic", None)
    return bool(check()) if callable(check) else False


_PATCHERS: dict[str, MemoPatcher] = {}


def memo_patcher(memo=None) -> MemoPatcher:
    """The patcher that shows `memo` (the shared one by default) to ComfyUI on its compute device; made on first use,
    so importing the pack registers nothing."""
    memo = shared_memo.MEMO if memo is None else memo
    device = mm.get_torch_device()
    key = f"{id(memo)}|{device}"
    patcher = _PATCHERS.get(key)
    if patcher is None or patcher.memo is not memo:
        patcher = _PATCHERS[key] = MemoPatcher(memo, device)
    return patcher


def load(patcher, *, memory_required: int = 0, force_full_load: bool = False) -> None:
    """Load one SDVG model for a call, with the shared memo registered with ComfyUI (from then on): in the same call
    for a model ComfyUI loads whole, in a call of its own after a dynamic (Dynamic VRAM) model, so that ComfyUI keeps
    its dynamic free path for it (module docstring)."""
    memo = memo_patcher()
    dynamic = is_dynamic(patcher)
    with own_load(yield_budget=dynamic):
        if dynamic:
            mm.load_models_gpu([patcher], memory_required=memory_required, force_full_load=force_full_load)
            if not registered():
                with memo.registering():
                    mm.load_models_gpu([memo])
        else:
            with memo.registering():
                mm.load_models_gpu([patcher, memo], memory_required=memory_required, force_full_load=force_full_load)


def registered(memo=None) -> bool:
    """Whether ComfyUI currently counts the memo among its loaded models."""
    patcher = memo_patcher(memo)
    return any(getattr(m, "model", None) is patcher for m in getattr(mm, "current_loaded_models", []))
