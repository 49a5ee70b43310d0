"""The one memo shared by every SDVG node (derived data: KV and decoder caches, drafts, blocks, scores, pixels), its
budget, and how its memory goes back: the running generation's held entries when the generation ends, everything
when ComfyUI frees memory, and the freed pages to the operating system."""
from __future__ import annotations

import logging

from ..sdvg_core.engine.heap import trim_heap
from ..sdvg_core.derived.memo import TieredMemo

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
    return int(memo.bytes) + int(memo.pinned_bytes)


def release_run(memo=MEMO) -> int:
    """The generation ended (or was cancelled): drop the entries it held outside the budget (the decoder cache head,
    the newest blocks' pixels, the pending draft's decode) and give the freed pages back. Returns the bytes released
    (0 when the engine released them already: the pages still go back)."""
    freed = int(memo.release_run())
    trim_heap()
    return freed


def drop_all(memo=MEMO) -> int:
    """Drop every entry (ComfyUI unloads everything: Unload Models, /free, an out-of-memory error); returns the bytes
    dropped. They are derived data: a later run recomputes what it needs."""
    dropped = memo_bytes(memo)
    memo.clear()
    if dropped:
        trim_heap()
        LOG.info("SDVG: released %.2f GiB of cached results", dropped / GIB)
    return dropped


def evict(nbytes: int, memo=MEMO, keep_held: bool = False) -> int:
    """Drop least-recently-used entries worth at least `nbytes` (the memo's own eviction: big entries first, then
    small ones), then what the running generation holds unless `keep_held`; returns the bytes dropped."""
    freed = memo.evict(nbytes)
    if freed < nbytes and not keep_held:
        freed += release_run(memo)
    return freed
