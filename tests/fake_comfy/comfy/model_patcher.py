"""Fake ModelPatcher: holds the module and its devices; a fresh patches_uuid per instance."""
from __future__ import annotations

import uuid


class ModelPatcher:
    def __init__(self, model, load_device, offload_device, size: int = 0, weight_inplace_update: bool = False):
        self.model, self.load_device, self.offload_device, self.size = model, load_device, offload_device, size
        if getattr(model, "device", None) is None:
            model.device = offload_device
        self.patches: dict = {}
        self.patches_uuid = uuid.uuid4()
        self.loaded = False

    def model_size(self) -> int:
        return self.size

    def clone(self) -> "ModelPatcher":
        c = ModelPatcher(self.model, self.load_device, self.offload_device, self.size)
        c.patches, c.patches_uuid = dict(self.patches), self.patches_uuid
        return c
