"""One readable report of how a state dict differs from a model's: missing, unexpected and mis-shaped keys.

Shared by every strict loader (Wan DiT, Wan VAE, ImageReward) so all errors read the same way.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

MAX_LISTED_KEYS = 5  # keys shown per category; the count says how many there are


def key_list(keys: Iterable[str]) -> str:
    """'N (first, second, ..., ...)' with at most MAX_LISTED_KEYS names, sorted."""
    keys = sorted(keys)
    shown = ", ".join(keys[:MAX_LISTED_KEYS])
    return f"{len(keys)} ({shown}{', ...' if len(keys) > MAX_LISTED_KEYS else ''})"


def key_mismatch(expected: Mapping[str, Sequence[int]], got: Mapping[str, Sequence[int]],
                 name: Callable[[str], str] = lambda k: k) -> str | None:
    """None when `got` has exactly the expected keys and shapes, else 'missing keys: ...; unexpected keys: ...'.

    `name` maps keys to the names the user's file uses (e.g. ImageReward.pt names for a transformers model).
    """
    missing = [name(k) for k in expected if k not in got]
    unexpected = [name(k) for k in got if k not in expected]
    shapes = sorted(f"{name(k)} {tuple(got[k])} != {tuple(expected[k])}"
                    for k in expected if k in got and tuple(got[k]) != tuple(expected[k]))
    parts = []
    if missing:
        parts.append(f"missing keys: {key_list(missing)}")
    if unexpected:
        parts.append(f"unexpected keys: {key_list(unexpected)}")
    if shapes:
        parts.append(f"shape mismatches: {len(shapes)} ({'; '.join(shapes[:MAX_LISTED_KEYS])})")
    return "; ".join(parts) or None
