"""Content digests: what names a tensor in memo keys and lineages (its dtype, shape and bytes)."""
from __future__ import annotations

import hashlib

import torch


def tensor_digest(t: torch.Tensor, *extra: str) -> str:
    """Content hash of a tensor's dtype, shape and bytes, and of `extra` strings."""
    h = hashlib.blake2b(digest_size=16)
    c = t.detach().to("cpu").contiguous()
    h.update(str((c.dtype, tuple(c.shape))).encode())
    h.update(c.view(torch.uint8).numpy().tobytes() if c.numel() else b"")
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()
