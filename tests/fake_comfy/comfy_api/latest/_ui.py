"""Fake UI outputs: they only remember what a node asked to show."""
from __future__ import annotations

from typing import Any


class _UIOutput:
    def as_dict(self) -> dict:
        raise NotImplementedError


class PreviewText(_UIOutput):
    def __init__(self, value: str, **kwargs: Any):
        self.value = value

    def as_dict(self) -> dict:
        return {"text": (self.value,)}


class PreviewImage(_UIOutput):
    def __init__(self, image, animated: bool = False, cls: Any = None, **kwargs: Any):
        self.image, self.animated = image, animated

    def as_dict(self) -> dict:
        n = 0 if self.image is None else int(self.image.shape[0])
        return {"images": [{"filename": f"fake_{i:05d}.png", "subfolder": "", "type": "temp"} for i in range(n)],
                "animated": (self.animated,)}
