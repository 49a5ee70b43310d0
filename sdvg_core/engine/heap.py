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
import time
from dataclasses import dataclass
from functools import lru_cache

# Blocks between trims. The tiny 300-block probe (scripts/memo_rss_probe.py, default 2 GiB memo, shared 2-core VM):
# every 8 blocks, RSS 820-846 MiB from block 150 on (memo 280-331 MiB of tensors over 416 MiB at block 0) and 48.7 s
# of CPU (37 trims, 0.81 s of it); every 4 blocks, 784-806 MiB and 51.0 s (75 trims, 0.92 s); never, 1.4-3.3 GiB
# and 48.6 s. Every 8 keeps RSS near the memo at no measurable cost.
TRIM_EVERY_BLOCKS = 8


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
    """A per-block hook: `trimmer.block_done()` after each committed block trims the heap every `every` blocks
    (0: never); `trims` and `seconds` say how many trims it made and how long they took."""

    every: int = TRIM_EVERY_BLOCKS
    blocks: int = 0
    trims: int = 0
    seconds: float = 0.0

    def block_done(self) -> None:
        self.blocks += 1
        if self.every > 0 and self.blocks % self.every == 0 and _libc() is not None:
            t0 = time.perf_counter()
            trim_heap()
            self.seconds += time.perf_counter() - t0
            self.trims += 1
