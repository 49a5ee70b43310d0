"""The pack's user-facing error and how its messages are put together."""
from __future__ import annotations


class SDVGError(RuntimeError):
    """A user-facing error: what is wrong and how to fix it."""


def sentence(cause: object) -> str:
    """An error's text as a sentence that ends with exactly one period (causes often end with their own)."""
    text = str(cause).rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."
