"""Fake comfy.utils: ProgressBar reporting to a module-level hook list."""
from __future__ import annotations

PROGRESS: list[tuple] = []  # (value, total, has_preview, node_id)


class ProgressBar:
    def __init__(self, total, node_id=None):
        self.total, self.current, self.node_id = total, 0, node_id

    def update_absolute(self, value, total=None, preview=None):
        if total is not None:
            self.total = total
        self.current = min(value, self.total)
        PROGRESS.append((self.current, self.total, preview is not None, self.node_id))

    def update(self, value):
        self.update_absolute(self.current + value)
