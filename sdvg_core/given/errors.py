"""The one error of given pixels: a picture or video that cannot be used (docs/pixels.md §1)."""
from __future__ import annotations


class PixelInputError(ValueError):
    """A start image or input video that cannot be used; the message names the file, the problem and the fix."""


class InputUnreadable(PixelInputError):
    """An input video whose frame `frame` (of the file, from 0; at `seconds` when known) cannot be decoded: the file
    is damaged or cut short. A run that meets it mid-way ends there, as where an input runs out."""

    def __init__(self, message: str, frame: int, seconds: float | None = None):
        super().__init__(message)
        self.frame, self.seconds = frame, seconds
