"""A bounded memo for derived data (KV caches, decoder caches, drafts, scores), LRU under a byte budget.

Keys always contain the lineage of the history the value was computed from, so a lookup can never return
a cache built for another history; eviction only costs recomputation.
"""
from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Hashable, Iterator

import torch

from .keys import key_kind


def nbytes_of(value: Any, _seen: set[int] | None = None) -> int:
    """Bytes held by the tensors inside a value (tensors, dataclasses, tuples/lists/dicts; shared ones once)."""
    seen = set() if _seen is None else _seen
    if isinstance(value, torch.Tensor):
        key = value.untyped_storage().data_ptr() if value.device.type != "meta" else id(value)
        if key in seen:
            return 0
        seen.add(key)
        return value.untyped_storage().nbytes()
    if hasattr(value, "nbytes") and not is_dataclass(value) and isinstance(getattr(value, "nbytes"), int):
        return int(value.nbytes)
    if is_dataclass(value):
        return sum(nbytes_of(getattr(value, f.name), seen) for f in fields(value))
    if isinstance(value, (tuple, list)):
        return sum(nbytes_of(v, seen) for v in value)
    if isinstance(value, dict):
        return sum(nbytes_of(v, seen) for v in value.values())
    if hasattr(value, "__dict__"):
        return sum(nbytes_of(v, seen) for v in vars(value).values())
    return 0


MAX_ENTRIES = 1 << 16  # entries a memo keeps at most, whatever their bytes (scores of ~30k blocks of a tau sweep)


@dataclass
class MemoStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class Memo:
    """Least-recently-used store whose entries' tensor bytes stay under `max_bytes`, plus the running
    generation's held entries.

    The budget is for reuse across runs (a re-queue, a tau sweep). What the running generation will read again
    (the decoder cache after the newest block, the pixel history a recipe re-encodes, a model's KV cache, text
    K/V, a draft's decode) is *held* in named slots outside the budget, however large: each slot keeps its newest
    `keep` entries, so the held memory is bounded by what the recipes need (engine/memory.py counts it), and
    `release_run()` drops it all when the generation ends. A held entry also goes into the LRU when it fits.

    Every entry is stamped with the run id current when it was stored (`stamped`), so an engine can tell reuse
    within one execution (part of a fresh run) from reuse of an earlier execution's result (`origin`).
    """

    def __init__(self, max_bytes: int, max_entries: int = MAX_ENTRIES):
        self.max_bytes = max_bytes
        self.max_entries = max_entries  # tensor-free entries (scores) weigh 0 bytes: the count bounds them
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._pinned: dict[str, list[tuple[Hashable, Any]]] = {}  # slot -> [(key, value)], newest last
        self._origin: dict[Hashable, str] = {}  # key -> run id that stored it (entries alive in data or pins)
        self.run_id = ""  # stamp for entries stored now (set by `stamped`)
        self.bytes = 0
        self.stats = MemoStats()

    def size_of(self, value: Any, key: Hashable = None) -> int:
        """Bytes charged for the value stored under `key` (its tensor bytes; a test may charge full-size bytes)."""
        return nbytes_of(value)

    def __len__(self) -> int:
        return len(self._data)

    def _held(self, key: Hashable) -> tuple[bool, Any]:
        for entries in self._pinned.values():
            for k, v in entries:
                if k == key:
                    return True, v
        return False, None

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data or self._held(key)[0]

    def get(self, key: Hashable) -> Any | None:
        """The running generation's held entry for `key`, else the LRU's (a held entry is the live one: e.g. a KV
        view the run extends in place, where the LRU may keep a snapshot of it for later runs)."""
        found, v = self._held(key)
        if found:
            self.stats.hits += 1
            return v
        item = self._data.get(key)
        if item is None:
            self.stats.misses += 1
            return None
        self._data.move_to_end(key)
        self.stats.hits += 1
        return item[0]

    def keeps(self, nbytes: int) -> bool:
        """Whether an entry of `nbytes` would be stored (not larger than the whole budget)."""
        return nbytes <= self.max_bytes

    def origin(self, key: Hashable) -> str:
        """The run id that stored `key` ("" when unknown or not stored)."""
        return self._origin.get(key, "")

    @contextmanager
    def stamped(self, run_id: str) -> Iterator[None]:
        """Stamp the entries stored inside the block with `run_id`."""
        previous, self.run_id = self.run_id, run_id
        try:
            yield
        finally:
            self.run_id = previous

    def pin(self, slot: str, key: Hashable, value: Any, keep: int = 1) -> Any:
        """Hold `value` under `key` in `slot` for the running generation (the slot keeps its newest `keep`
        entries), outside the byte budget; it also goes into the LRU when it fits."""
        self.hold(slot, key, value, keep)
        return self.put(key, value)

    def hold(self, slot: str, key: Hashable, value: Any, keep: int = 1) -> Any:
        """`pin` without the LRU copy."""
        if keep < 1:
            raise ValueError(f"a held slot keeps at least one entry, got keep={keep}")
        entries = [(k, v) for k, v in self._pinned.get(slot, []) if k != key]
        entries.append((key, value))
        for k, _ in entries[:-keep]:
            self._forget_origin(k, dropping_slot=slot)
        self._pinned[slot] = entries[-keep:]
        self._origin[key] = self.run_id
        return value

    def release_run(self) -> int:
        """Drop every held entry (the running generation ended); returns the bytes no longer held. Entries that
        also fit the LRU stay there for later runs."""
        freed = self.pinned_bytes
        keys = [k for entries in self._pinned.values() for k, _ in entries]
        self._pinned.clear()
        for k in keys:
            self._forget_origin(k)
        return freed

    @property
    def pinned_bytes(self) -> int:
        seen: set[int] = set()
        return sum(nbytes_of(v, seen) for entries in self._pinned.values() for _, v in entries)

    def put(self, key: Hashable, value: Any) -> Any:
        """Store and return `value`; a value larger than the whole budget is returned but not kept."""
        size = self.size_of(value, key)
        if key in self._data:
            self.bytes -= self._data.pop(key)[1]
        self._origin[key] = self.run_id
        if size > self.max_bytes:
            self._forget_origin(key)
            return value
        self._data[key] = (value, size)
        self.bytes += size
        self._evict_to(self.max_bytes)
        return value

    def _evict_to(self, max_bytes: int) -> None:
        while (self.bytes > max_bytes or len(self._data) > self.max_entries) and self._data:
            key, (_, old) = self._data.popitem(last=False)
            self.bytes -= old
            self.stats.evictions += 1
            self._forget_origin(key)

    def _forget_origin(self, key: Hashable, dropping_slot: str | None = None) -> None:
        """Forget a key's stamp once no copy of it is left (neither in the LRU nor held in another slot)."""
        if key in self._data:
            return
        for slot, entries in self._pinned.items():
            if slot != dropping_slot and any(k == key for k, _ in entries):
                return
        self._origin.pop(key, None)

    def clear(self) -> None:
        self._data.clear()
        self._pinned.clear()
        self._origin.clear()
        self.bytes = 0

    def resize(self, max_bytes: int) -> None:
        """Change the budget, evicting least-recently-used entries down to it."""
        self.max_bytes = max_bytes
        self._evict_to(max_bytes)

    def _drop(self, key: Hashable) -> None:
        item = self._data.pop(key, None)
        if item is not None:
            self.bytes -= item[1]
            self._forget_origin(key)

    def kinds(self) -> dict[str, int]:
        """Entry count per key kind (the first element of tuple keys), for reports and tests."""
        out: dict[str, int] = {}
        for k in self._data:
            kind = key_kind(k)
            out[kind] = out.get(kind, 0) + 1
        return out


# Small tier: what a re-run needs to replay a prefix's decisions without a forward (block latents: 1.2 MB each at
# 832x480; scores; anchors: 0.4 MB). 1 GiB holds those of ~400 blocks of both models; decoded pixels (27 MB a
# block in bf16) and KV / decoder caches (GBs) go to the large tier.
SMALL_TIER_BYTES = 1 << 30
SMALL_ENTRY_MAX = 8 << 20
SMALL_TIER_SHARE = 4  # TieredMemo.split: the small tier's share of one budget is 1/4


class TieredMemo:
    """Two LRU memos: small entries (drafts, target blocks, scores, anchors) apart from big ones (KV/decoder caches).

    With one byte-budgeted LRU, a single multi-GB cache at 832x480 evicts every small entry of the earlier
    blocks, and a re-run after moving tau recomputes from block 0. Keeping the small entries in their own budget
    means a re-run always finds the decisions' inputs of the unchanged prefix; big caches are only recomputed.
    Same interface as `Memo` (an Engine accepts either).
    """

    def __init__(self, large_bytes: int, small_bytes: int = SMALL_TIER_BYTES, small_entry_max: int = SMALL_ENTRY_MAX,
                 memo: type[Memo] = Memo):
        self.small = memo(small_bytes)
        self.large = memo(large_bytes)
        self.small_entry_max = small_entry_max

    @staticmethod
    def split(total_bytes: int, memo: type[Memo] = Memo) -> "TieredMemo":
        """One budget shared out: a quarter (at most SMALL_TIER_BYTES) for the small tier, the rest for caches."""
        small = min(total_bytes // SMALL_TIER_SHARE, SMALL_TIER_BYTES)
        return TieredMemo(total_bytes - small, small_bytes=small, memo=memo)

    @property
    def max_bytes(self) -> int:
        return self.small.max_bytes + self.large.max_bytes

    @property
    def bytes(self) -> int:
        return self.small.bytes + self.large.bytes

    @property
    def stats(self) -> MemoStats:
        a, b = self.small.stats, self.large.stats
        return MemoStats(a.hits + b.hits, a.misses + b.misses, a.evictions + b.evictions)

    def __len__(self) -> int:
        return len(self.small) + len(self.large)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.small or key in self.large

    def get(self, key: Hashable) -> Any | None:
        found, v = self.large._held(key)  # held entries (all in the large tier's slots) first, as Memo.get
        if found:
            self.large.stats.hits += 1
            return v
        if key in self.small:
            return self.small.get(key)
        return self.large.get(key)

    def keeps(self, nbytes: int) -> bool:
        return nbytes <= (self.small.max_bytes if nbytes <= self.small_entry_max else self.large.max_bytes)

    def hold(self, slot: str, key: Hashable, value: Any, keep: int = 1) -> Any:
        return self.large.hold(slot, key, value, keep)

    def _tiers(self, key: Hashable, value: Any) -> tuple[Memo, Memo]:
        """(the tier this value belongs to, the other one)."""
        small = self.large.size_of(value, key) <= self.small_entry_max
        return (self.small, self.large) if small else (self.large, self.small)

    def put(self, key: Hashable, value: Any) -> Any:
        tier, other = self._tiers(key, value)
        other._drop(key)
        return tier.put(key, value)

    def pin(self, slot: str, key: Hashable, value: Any, keep: int = 1) -> Any:
        """Held entries of every size live in the large tier's slots (outside both budgets)."""
        self.large.hold(slot, key, value, keep)
        return self.put(key, value)

    def origin(self, key: Hashable) -> str:
        return self.small.origin(key) or self.large.origin(key)

    @contextmanager
    def stamped(self, run_id: str) -> Iterator[None]:
        with self.small.stamped(run_id), self.large.stamped(run_id):
            yield

    def release_run(self) -> int:
        return self.small.release_run() + self.large.release_run()

    @property
    def pinned_bytes(self) -> int:
        return self.small.pinned_bytes + self.large.pinned_bytes

    def resize(self, large_bytes: int, small_bytes: int | None = None) -> None:
        self.large.resize(large_bytes)
        if small_bytes is not None:
            self.small.resize(small_bytes)

    def clear(self) -> None:
        self.small.clear()
        self.large.clear()

    def kinds(self) -> dict[str, int]:
        out = self.small.kinds()
        for k, v in self.large.kinds().items():
            out[k] = out.get(k, 0) + v
        return out
