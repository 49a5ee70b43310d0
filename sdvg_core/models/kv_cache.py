"""Derived per-prompt and per-history data of a Wan DiT: cross-attention text K/V and the self-attention KV cache.

Both are immutable views: a KV cache view never changes what it reads, a new block is written after it
(copy-on-write when another branch has committed past it), and a commit returns a new view (docs/design.md §3.2).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .wan_config import WanDiTConfig


@dataclass(frozen=True)
class TextKV:
    """Cross-attention keys/values of one prompt for every layer, [B, heads, text_len, head_dim] each.

    Computed once per prompt and model, reused for every block and step (the text never changes).
    """

    k: tuple[torch.Tensor, ...]
    v: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class _KVBuffer:
    """Preallocated per-layer key/value storage [L][B, heads, capacity, head_dim].

    `frontier` is the end of the longest committed prefix built on this buffer. A view of length L may
    write at [L, ...) only while frontier <= L; otherwise it forks (copy-on-write), so a committed view is
    never overwritten by another branch.
    """

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], frontier: int = 0):
        self.k, self.v, self.frontier = k, v, frontier

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


@dataclass(frozen=True)
class KVCache:
    """An immutable view: the first `length` tokens of a buffer are this history's keys and values.

    Keys are stored after q/k RMSNorm and RoPE (so their positions are baked in); values as projected.
    Writing a new block never changes what this view reads: a forward writes its block into the slots
    right after `length` (scratch) and a commit returns a *new* view that includes them.
    """

    buffer: _KVBuffer
    length: int
    tokens_per_frame: int

    @staticmethod
    def empty(cfg: WanDiTConfig, *, batch: int, window_frames: int, tokens_per_frame: int,
              device: torch.device | str, dtype: torch.dtype) -> "KVCache":
        """Allocate room for `window_frames` latent frames (e.g. 6 = 9360 tokens at 832x480, Krea's window)."""
        shape = (batch, cfg.num_heads, window_frames * tokens_per_frame, cfg.head_dim)
        k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)]
        v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)]
        return KVCache(_KVBuffer(k, v), 0, tokens_per_frame)

    @property
    def frames(self) -> int:
        return self.length // self.tokens_per_frame

    @property
    def capacity(self) -> int:
        return self.buffer.capacity

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def keys(self, layer: int) -> torch.Tensor:
        return self.buffer.k[layer][:, :, : self.length]

    def values(self, layer: int) -> torch.Tensor:
        return self.buffer.v[layer][:, :, : self.length]

    def writable(self, new_tokens: int) -> "KVCache":
        """A view with the same contents whose buffer may be written at [length, length + new_tokens).

        Forks (copies the prefix into a fresh buffer) when another branch has committed past `length`.
        When the window is full, the fork keeps only the newest tokens (a rolling window; keys keep the
        absolute RoPE positions they were written with).
        """
        buf, n = self.buffer, self.length
        if new_tokens > buf.capacity:
            raise ValueError(f"a block of {new_tokens} tokens does not fit a KV window of {buf.capacity} tokens")
        overflow = n + new_tokens - buf.capacity
        if buf.frontier <= n and overflow <= 0:
            return self
        keep_from = max(overflow, 0)
        # drop whole frames when rolling, so a view always holds frames
        keep_from = -(-keep_from // self.tokens_per_frame) * self.tokens_per_frame
        k = [torch.zeros_like(t) for t in buf.k]
        v = [torch.zeros_like(t) for t in buf.v]
        kept = n - keep_from
        for src, dst in zip(buf.k + buf.v, k + v):
            dst[:, :, :kept] = src[:, :, keep_from:n]
        return KVCache(_KVBuffer(k, v, frontier=kept), kept, self.tokens_per_frame)

    def commit(self, new_tokens: int) -> "KVCache":
        """The view that also holds the `new_tokens` just written after `length` (call on a `writable` view)."""
        end = self.length + new_tokens
        self.buffer.frontier = max(self.buffer.frontier, end)
        return KVCache(self.buffer, end, self.tokens_per_frame)
