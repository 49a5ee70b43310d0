"""Stable identities of hosted models, for the shared memo's keys: the same weights give the same key across node
re-executions (so a re-queue finds its cached results); different weights never share one."""
from __future__ import annotations

import hashlib
import os
import uuid
import weakref
from typing import Any

import torch


def file_key(path: str, *extra: str) -> str:
    """Identity of weights read from a file: a changed file (mtime/size) or dtype gives a new key."""
    st = os.stat(path)
    return "|".join(("file", os.path.realpath(path), str(st.st_mtime_ns), str(st.st_size), *extra))


_TOKENS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def object_token(obj: Any) -> str:
    """A uuid per live host object (never reused, unlike id()), for memo keys of ComfyUI-loaded models."""
    tok = _TOKENS.get(obj)
    if tok is None:
        tok = _TOKENS[obj] = uuid.uuid4().hex
    return tok


def weights_token(module: torch.nn.Module) -> str:
    """A digest of a module's tensors (names, shapes, dtypes and every byte): the same weights give the same token
    across reloads. ComfyUI's RAM-pressure output cache may drop a loader's output between queue presses; the
    reloaded object is new, and an object token would then miss every cached result of the same weights."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in module.state_dict().items():
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
