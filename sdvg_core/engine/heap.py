"""Give the C heap's free pages back to the OS during long runs, so a process's RSS follows what the memo holds.

On glibc, the many small tensors a run frees (VAE caches, KV slices, pixels the memo's LRU evicts) leave free
chunks scattered through the heap; glibc hands back only the free space at the heap's top, so RSS climbs to the
run's high-water mark and stays there, far above the memo's budget (scripts/memo_rss_probe.py measures both).
`malloc_trim(0)` returns every whole free page, wherever it lies. `HeapTrimmer` calls it every few blocks; the
command lines (demo, sdvg_eval, the benchmark) install it. ComfyUI's process keeps its own policy (the nodes trim
after a run). Elsewhere (macOS, Windows, musl) there is no such call and this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from dataclasses import dataclass
from functools import lru_cache

# Blocks between trims. Measured on the tiny 300-block probe (scripts/memo_rss_probe.py, shared 2-core VM): a trim
# takes a few milliseconds there against ~0.2 s per block, and RSS stays within a few blocks' garbage of the memo.
TRIM_EVERY_BLOCKS = 4


@lru_cache(maxsize=1)
def _libc():
    """glibc, or None where malloc_trim does not exist (not Linux, or a C library without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def trim_heap() -> bool:
    """Return the heap's whole free pages to the OS (glibc `malloc_trim(0)`); True when memory was released."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


@dataclass
class HeapTrimmer:
    """A per-block hook: `trimmer.block_done()` after each committed block trims the heap every `every` blocks."""

    every: int = TRIM_EVERY_BLOCKS
    blocks: int = 0
    trims: int = 0

    def block_done(self) -> None:
        self.blocks += 1
        if self.every > 0 and self.blocks % self.every == 0 and _libc() is not None:
            trim_heap()
            self.trims += 1
