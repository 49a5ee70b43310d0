"""ComfyUI progress bars over SDVG's model calls, with the newest committed frame as preview."""
from __future__ import annotations

import comfy.utils

from ..sdvg_core.engine.engine import ProgressEvent
from .images import to_pil

PREVIEW_SIZE = 512  # longest side of a progress preview (ComfyUI's default max preview resolution)


class BlockProgress:
    """One bar over a whole generation's model calls, with the newest committed frame as preview per block."""

    def __init__(self, num_blocks: int, steps_per_block: int, first_block: int = 0):
        self.steps = max(steps_per_block, 1)
        self.first = first_block
        self.total = max(num_blocks - first_block, 1) * self.steps
        self.bar = comfy.utils.ProgressBar(self.total)
        self.value = 0

    def __call__(self, ev: ProgressEvent) -> None:
        base = (ev.block - self.first) * self.steps
        if ev.kind == "step":
            value = base + min(ev.step, self.steps - 1)
            preview = None
        else:
            value = base + self.steps
            preview = ("JPEG", to_pil(ev.preview), PREVIEW_SIZE) if ev.preview is not None else None
        self.value = max(self.value, value)
        self.bar.update_absolute(self.value, self.total, preview)


class StepProgress:
    """One bar over one node's model calls (one block's steps); a committed block adds its last frame as preview."""

    def __init__(self, steps: int):
        self.steps = steps
        self.bar = comfy.utils.ProgressBar(steps)

    def __call__(self, ev: ProgressEvent) -> None:
        if ev.kind == "step":
            self.bar.update_absolute(min(ev.step, self.steps), self.steps)
        elif ev.preview is not None:
            self.bar.update_absolute(self.steps, self.steps, ("JPEG", to_pil(ev.preview), PREVIEW_SIZE))
