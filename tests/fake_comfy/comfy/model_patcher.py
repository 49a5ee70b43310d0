"""Fake ModelPatcher: holds the module and its devices, counts its weights as loaded once `partially_load` ran, and
moves nothing (CPU only); a fresh patches_uuid per instance. The methods ComfyUI's memory manager calls exist with
ComfyUI 0.3.64's signatures.

Weight patches (what ComfyUI's LoRA loaders add with `add_patches` on a clone): as ComfyUI does, they are written
into the shared model's weights when this patcher loads it (the model remembers which patches_uuid its weights
hold, so loading a clone with other patches restores the originals first) and removed on a full `detach`. Here a
patch is a weight delta (strength, tensor) for a state-dict key.
"""
from __future__ import annotations

import uuid


class ModelPatcher:
    def __init__(self, model, load_device, offload_device, size: int = 0, weight_inplace_update: bool = False):
        self.model, self.load_device, self.offload_device, self.size = model, load_device, offload_device, size
        if getattr(model, "device", None) is None:
            model.device = offload_device
        self.patches: dict = {}
        self.patches_uuid = uuid.uuid4()
        self.parent = None
        self.model_options: dict = {"transformer_options": {}}
        self.loaded = False

    def model_size(self) -> int:
        return self.size

    def is_dynamic(self) -> bool:
        return False  # 0.33's ModelPatcherDynamic says True

    def loaded_size(self) -> int:
        return self.model_size() if self.loaded else 0

    def current_loaded_device(self):
        return self.model.device

    def model_patches_to(self, device) -> None:
        return None

    def model_dtype(self):
        return None

    def add_patches(self, patches: dict, strength_patch: float = 1.0, strength_model: float = 1.0) -> list:
        """key -> weight delta; a new patches_uuid (ComfyUI's add_patches)."""
        for key, delta in patches.items():
            self.patches.setdefault(key, []).append((float(strength_patch), delta))
        self.patches_uuid = uuid.uuid4()
        return list(patches)

    def _unpatch(self) -> None:
        backup = getattr(self.model, "_fake_backup", None) or {}
        params = dict(self.model.named_parameters())
        for key, original in backup.items():
            params[key].data.copy_(original)
        self.model._fake_backup, self.model._fake_patched = {}, None

    def _patch(self) -> None:
        if getattr(self.model, "_fake_patched", None) == self.patches_uuid:
            return
        self._unpatch()
        params = dict(self.model.named_parameters())
        backup = {}
        for key, entries in self.patches.items():
            w = params[key]
            backup[key] = w.detach().clone()
            for strength, delta in entries:
                w.data.add_(strength * delta.to(w.dtype))
        self.model._fake_backup, self.model._fake_patched = backup, self.patches_uuid

    def partially_load(self, device_to, extra_memory=0, force_patch_weights=False) -> int:
        self._patch()
        self.loaded = True
        self.model.device = device_to  # as ComfyUI does after loading (fails on modules with a read-only .device)
        return self.model_size()

    def partially_unload(self, device_to, memory_to_free=0) -> int:
        return 0  # plain torch modules are unloaded whole (detach)

    def detach(self, unpatch_all: bool = True):
        if unpatch_all:
            if getattr(self.model, "_fake_patched", None) == self.patches_uuid:
                self._unpatch()
            self.loaded = False
            self.model.device = self.offload_device
        return self.model

    def is_clone(self, other) -> bool:
        return hasattr(other, "model") and self.model is other.model

    def clone(self) -> "ModelPatcher":
        c = ModelPatcher(self.model, self.load_device, self.offload_device, self.size)
        c.patches, c.patches_uuid = {k: list(v) for k, v in self.patches.items()}, self.patches_uuid
        c.model_options = {**self.model_options}
        return c
