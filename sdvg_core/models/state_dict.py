"""How a state dict fits a model, shared by every loader (Wan DiT, Wan VAE, ImageReward): the one error type, the
one prefix normalisation and the one report of how a state dict differs from a model's.

Pure key/shape logic with no file access, so it sits in models/ (models never import io/; io imports this).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

MAX_LISTED_KEYS = 5  # keys shown per category; the count says how many there are

V = TypeVar("V")


class CheckpointError(ValueError):
    """A model file (or state dict) cannot be used; the message names the file, says why and what to do."""

    def __init__(self, message: str, path: str | os.PathLike | None = None) -> None:
        self.path = None if path is None else str(path)
        if self.path is not None and Path(self.path).name not in message:
            message = f"{self.path}: {message}"
        super().__init__(message)


@dataclass(frozen=True)
class KeyLayout:
    """How one model kind's keys look in files found in the wild: anchor names and the prefixes put before them."""

    model: str  # what the user is loading, for messages ("Wan 2.1 DiT")
    anchors: tuple[str, ...]  # keys every checkpoint of this model has (used to find the prefix)
    prefixes: tuple[str, ...]  # known wrappers, longest first
    keep_unprefixed: bool  # True: keys without the prefix stay (DDP); False: they belong to other models, dropped


def normalize_prefix(sd: Mapping[str, V], layout: KeyLayout,
                     source: str | os.PathLike = "<state dict>") -> tuple[dict[str, V], str]:
    """Strip the known prefix under which one of the layout's anchors is found; return (state dict, prefix).

    Without `keep_unprefixed` the keys outside the prefix are dropped (a full ComfyUI checkpoint also holds the
    VAE and text encoder); with it they stay, and a key present both with and without the prefix is refused
    (a DDP `module.` file merged with a plain one would otherwise load one of the two silently).
    """
    prefix = next((p for p in layout.prefixes if any(p + a in sd for a in layout.anchors)), "")
    if not prefix:
        if not any(a in sd for a in layout.anchors):
            # no anchor anywhere: strip a prefix every key shares, so the mismatch report shows plain names
            prefix = next((p for p in layout.prefixes if sd and all(k.startswith(p) for k in sd)), "")
        if not prefix:
            return dict(sd), ""
    out: dict[str, V] = {}
    for key, value in sd.items():
        if key.startswith(prefix):
            name = key[len(prefix):]
        elif layout.keep_unprefixed:
            name = key
        else:
            continue
        if name in out:
            raise CheckpointError(f"key {name!r} appears both with and without the prefix '{prefix}'; "
                                  f"the file mixes two {layout.model} state dicts. Re-save one of them alone.", source)
        out[name] = value
    return out, prefix


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


# Names that training wrappers insert into every key below them (torch FSDP's FlattenParamsWrapper / use_orig_params
# module path). Self-Forcing, Causal Forcing and LongLive load their checkpoints after removing it.
WRAPPER_NAMES = ("_fsdp_wrapped_module.",)


def strip_wrapper_names(sd: Mapping[str, V], source: str | os.PathLike = "<state dict>") -> dict[str, V]:
    """The state dict with every WRAPPER_NAMES part removed from its keys, wherever it sits in the name.

    A key present both with and without the wrapper name is refused (two state dicts mixed in one file).
    """
    if not any(w in k for k in sd for w in WRAPPER_NAMES):
        return dict(sd)
    out: dict[str, V] = {}
    for key, value in sd.items():
        name = key
        for w in WRAPPER_NAMES:
            name = name.replace(w, "")
        if name in out:
            raise CheckpointError(f"key {name!r} appears both with and without the training wrapper names "
                                  f"{list(WRAPPER_NAMES)}; the file mixes two state dicts. Re-save one of them alone.",
                                  source)
        out[name] = value
    return out
