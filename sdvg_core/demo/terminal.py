"""Messages after the terminal is gone (SIGHUP: a closed terminal window, a dropped ssh session): writing to it fails
with EIO, and a failed print must not stop a run from finishing its files. After a hangup, stdout and stderr are
wrapped so that a write that fails sends that stream to the null device (at the file descriptor too, so what Python
flushes at exit goes nowhere instead of failing); a stream that still works (a log file, a pipe) keeps every line."""
from __future__ import annotations

import io
import os
import sys


class Forgiving(io.TextIOBase):
    """A text stream whose writes and flushes never raise OSError: on the first failure it is pointed at the null
    device and stays there."""

    def __init__(self, stream):
        self._stream = stream

    def _lost(self) -> None:
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)  # the original object's buffer now flushes into nothing
            os.close(null)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        self._stream = open(os.devnull, "w")

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._lost()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")


def forgive_lost_terminal() -> None:
    """Wrap sys.stdout and sys.stderr (once) so that prints after a hangup cannot raise."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Forgiving):
            setattr(sys, name, Forgiving(stream))


__all__ = ["Forgiving", "forgive_lost_terminal"]
