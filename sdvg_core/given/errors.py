"""The one error of given pixels: a picture or video that cannot be used (docs/pixels.md §1), and the refusal of a URL
given where a file is read."""
from __future__ import annotations

import os
import re

# A value that names a resource on the network (https://, http://, ftp://, s3://, file://...): a scheme and "://".
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class PixelInputError(ValueError):
    """A start image or input video that cannot be used; the message names the file, the problem and the fix."""


class InputUnreadable(PixelInputError):
    """An input video whose frame `frame` (of the file, from 0; at `seconds` when known) cannot be decoded: the file
    is damaged or cut short. A run that meets it mid-way ends there, as where an input runs out."""

    def __init__(self, message: str, frame: int, seconds: float | None = None):
        super().__init__(message)
        self.frame, self.seconds = frame, seconds


def refuse_url(value: str | os.PathLike, what: str, kinds: str) -> None:
    """Refuse a URL given where a file is read (files are read from this machine only), quoting it as given: a path
    built from it would lose a slash and read as "not found"."""
    if isinstance(value, str) and URL.match(value.strip()):
        raise PixelInputError(f"{what} {value.strip()!r} is a URL: pictures and videos are read from files on this "
                              f"machine only; download it first (e.g. curl -LO '{value.strip()}') and give the "
                              f"file's path ({kinds})")
