"""A bounded memo for derived data (KV caches, decoder caches, drafts, scores), LRU under a byte budget.

Keys always contain the lineage of the history the value was computed from, so a lookup can never return
a cache built for another history; eviction only costs recomputation.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Hashable

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


@dataclass
class MemoStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class Memo:
    """Least-recently-used store whose entries' tensor bytes stay under `max_bytes`.

    A few named *pinned* slots sit outside the budget: each holds one entry (the newest put replaces it),
    so the head of a generation (e.g. the decoder cache after the last committed block) is never evicted
    however large it is, and a sequential run never has to recompute from the start.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._pinned: dict[str, tuple[Hashable, Any]] = {}
        self.bytes = 0
        self.stats = MemoStats()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data or any(k == key for k, _ in self._pinned.values())

    def get(self, key: Hashable) -> Any | None:
        item = self._data.get(key)
        if item is None:
            for k, v in self._pinned.values():
                if k == key:
                    self.stats.hits += 1
                    return v
            self.stats.misses += 1
            return None
        self._data.move_to_end(key)
        self.stats.hits += 1
        return item[0]

    def pin(self, slot: str, key: Hashable, value: Any) -> Any:
        """Keep `value` under `key` in the pinned `slot` (replacing the slot's previous entry) and in the LRU."""
        self._pinned[slot] = (key, value)
        return self.put(key, value)

    @property
    def pinned_bytes(self) -> int:
        return sum(nbytes_of(v) for _, v in self._pinned.values())

    def put(self, key: Hashable, value: Any) -> Any:
        """Store and return `value`; a value larger than the whole budget is returned but not kept."""
        size = nbytes_of(value)
        if key in self._data:
            self.bytes -= self._data.pop(key)[1]
        if size > self.max_bytes:
            return value
        self._data[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, old) = self._data.popitem(last=False)
            self.bytes -= old
            self.stats.evictions += 1
        return value

    def clear(self) -> None:
        self._data.clear()
        self._pinned.clear()
        self.bytes = 0

    def resize(self, max_bytes: int) -> None:
        """Change the budget, evicting least-recently-used entries down to it."""
        self.max_bytes = max_bytes
        while self.bytes > self.max_bytes and self._data:
            _, (_, old) = self._data.popitem(last=False)
            self.bytes -= old
            self.stats.evictions += 1

    def _drop(self, key: Hashable) -> None:
        item = self._data.pop(key, None)
        if item is not None:
            self.bytes -= item[1]

    def kinds(self) -> dict[str, int]:
        """Entry count per key kind (the first element of tuple keys), for reports and tests."""
        out: dict[str, int] = {}
        for k in self._data:
            kind = key_kind(k)
            out[kind] = out.get(kind, 0) + 1
        return out


class TieredMemo:
    """Two LRU memos: small entries (drafts, target blocks, scores, anchors) apart from big ones (KV/decoder caches).

    With one byte-budgeted LRU, a single multi-GB cache at 832x480 evicts every small entry of the earlier
    blocks, and a re-run after moving tau recomputes from block 0. Keeping the small entries in their own budget
    means a re-run always finds the decisions' inputs of the unchanged prefix; big caches are only recomputed.
    Same interface as `Memo` (an Engine accepts either).
    """

    def __init__(self, large_bytes: int, small_bytes: int = 1 << 30, small_entry_max: int = 64 << 20):
        self.small = Memo(small_bytes)
        self.large = Memo(large_bytes)
        self.small_entry_max = small_entry_max

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
        if key in self.small:
            return self.small.get(key)
        return self.large.get(key)

    def _tiers(self, value: Any) -> tuple[Memo, Memo]:
        """(the tier this value belongs to, the other one)."""
        small = nbytes_of(value) <= self.small_entry_max
        return (self.small, self.large) if small else (self.large, self.small)

    def put(self, key: Hashable, value: Any) -> Any:
        tier, other = self._tiers(value)
        other._drop(key)
        return tier.put(key, value)

    def pin(self, slot: str, key: Hashable, value: Any) -> Any:
        tier, other = self._tiers(value)
        other._drop(key)
        other._pinned.pop(slot, None)
        return tier.pin(slot, key, value)

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
