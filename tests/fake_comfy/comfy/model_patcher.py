"""Fake ModelPatcher: holds the module and its devices, counts its weights as loaded once `partially_load` ran, and
moves nothing (CPU only); a fresh patches_uuid per instance. The methods ComfyUI's memory manager calls exist with
ComfyUI 0.3.64's signatures."""
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

    def loaded_size(self) -> int:
        return self.model_size() if self.loaded else 0

    def current_loaded_device(self):
        return self.model.device

    def model_patches_to(self, device) -> None:
        return None

    def model_dtype(self):
        return None

    def partially_load(self, device_to, extra_memory=0, force_patch_weights=False) -> int:
        self.loaded = True
        self.model.device = device_to  # as ComfyUI does after loading (fails on modules with a read-only .device)
        return self.model_size()

    def partially_unload(self, device_to, memory_to_free=0) -> int:
        return 0  # plain torch modules are unloaded whole (detach)

    def detach(self, unpatch_all: bool = True):
        if unpatch_all:
            self.loaded = False
            self.model.device = self.offload_device
        return self.model

    def is_clone(self, other) -> bool:
        return hasattr(other, "model") and self.model is other.model

    def clone(self) -> "ModelPatcher":
        c = ModelPatcher(self.model, self.load_device, self.offload_device, self.size)
        c.patches, c.patches_uuid = dict(self.patches), self.patches_uuid
        return c
