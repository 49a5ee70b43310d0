"""The one memo shared by every SDVG node (derived data: KV and decoder caches, drafts, blocks, scores, pixels), its
budget, and how its memory goes back: the running generation's held entries when the generation ends, everything
when ComfyUI frees memory, and the freed pages to the operating system."""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

from ..sdvg_core.engine.memo import TieredMemo

LOG = logging.getLogger("SDVG")

DEFAULT_CACHE_GB = 2.0
GIB = 2**30
# One memo for every engine built by any node (keys hold model identities and lineages). Small entries (drafts,
# target blocks, scores) have their own 1 GB so a multi-GB KV/decoder cache never evicts them.
MEMO = TieredMemo(int(DEFAULT_CACHE_GB * GIB))


def set_cache_budget(gb: float) -> None:
    """Budget of the shared memo's big entries (KV and decoder caches), set from the Start/Generate nodes."""
    MEMO.resize(int(gb * GIB))


def memo_bytes(memo=MEMO) -> int:
    """Bytes the memo holds: its budgeted entries plus the running generation's held ones (an entry that is both is
    counted twice: an upper bound, which is what a memory manager needs)."""
    return int(memo.bytes) + int(getattr(memo, "pinned_bytes", 0))


def release_run(memo=MEMO) -> int:
    """The generation ended (or was cancelled): drop the entries it held outside the budget (the decoder cache head,
    the newest blocks' pixels, the pending draft's decode) and give the freed pages back. Returns the bytes released.

    `Memo.release_run` is sdvg_core's; older cores without it hold nothing outside the budget but the decoder head,
    which `clear` drops."""
    release = getattr(memo, "release_run", None)
    freed = int(release()) if release is not None else 0
    if freed:
        trim_allocator()
    return freed


def drop_all(memo=MEMO) -> int:
    """Drop every entry (ComfyUI unloads everything: Unload Models, /free, an out-of-memory error); returns the bytes
    dropped. They are derived data: a later run recomputes what it needs."""
    dropped = memo_bytes(memo)
    memo.clear()
    if dropped:
        trim_allocator()
        LOG.info("SDVG: released %.2f GiB of cached results", dropped / GIB)
    return dropped


def evict(nbytes: int, memo=MEMO, keep_held: bool = False) -> int:
    """Drop least-recently-used entries worth at least `nbytes` (big entries first, then small ones, then what the
    running generation holds, unless `keep_held`); returns the bytes dropped."""
    before = memo_bytes(memo)
    for tier in (memo.large, memo.small):
        need = nbytes - (before - memo_bytes(memo))
        if need <= 0:
            break
        budget = tier.max_bytes
        tier.resize(max(tier.bytes - need, 0))  # evicts LRU entries down to this size
        tier.resize(budget)
    if nbytes - (before - memo_bytes(memo)) > 0 and not keep_held:
        release_run(memo)
    return before - memo_bytes(memo)


def trim_allocator() -> bool:
    """Hand freed heap pages back to the OS (glibc `malloc_trim`). Without it the CPU memory of large freed tensors
    can stay in the process's malloc arenas and its RSS does not go down. No-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return False
