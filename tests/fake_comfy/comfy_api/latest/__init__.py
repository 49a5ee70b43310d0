"""Fake `comfy_api.latest`: io, ui and ComfyExtension."""
from __future__ import annotations

from . import _io as io
from . import _ui as ui


class ComfyExtension:
    async def on_load(self) -> None:
        return None

    async def get_node_list(self) -> list:
        raise NotImplementedError


__all__ = ["io", "ui", "ComfyExtension"]
