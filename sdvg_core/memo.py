"""A bounded memo for derived data (KV caches, decoder caches, drafts, scores), LRU under a byte budget.

Keys always contain the lineage of the history the value was computed from, so a lookup can never return
a cache built for another history; eviction only costs recomputation.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Hashable

import torch


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
    """Least-recently-used store whose entries' tensor bytes stay under `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.stats = MemoStats()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def get(self, key: Hashable) -> Any | None:
        item = self._data.get(key)
        if item is None:
            self.stats.misses += 1
            return None
        self._data.move_to_end(key)
        self.stats.hits += 1
        return item[0]

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
        self.bytes = 0

    def kinds(self) -> dict[str, int]:
        """Entry count per key kind (the first element of tuple keys), for reports and tests."""
        out: dict[str, int] = {}
        for k in self._data:
            kind = k[0] if isinstance(k, tuple) else str(k)
            out[kind] = out.get(kind, 0) + 1
        return out
