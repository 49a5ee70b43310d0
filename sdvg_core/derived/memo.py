"""A bounded memo for derived data (KV caches, decoder caches, drafts, scores), LRU under a byte budget, and the
one owner of its entries (`Memoiser`).

Keys always contain the lineage of the history the value was computed from, so a lookup can never return
a cache built for another history; eviction only costs recomputation. Every entry the engine stores is an `Entry`
(the value and the cost of computing it); `Memoiser` is the only code that makes, reads or credits one.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Hashable, Mapping

import torch

from .keys import key_kind
from .tally import Tally


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


# How many bytes an entry is charged: its tensor bytes. An instrumentation seam: a caller may install another sizer
# (the tests charge every entry the bytes it would have at 832x480).
Sizer = Callable[[Hashable, Any], int]


def tensor_bytes(key: Hashable, value: Any) -> int:
    return nbytes_of(value)


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

    Every entry is stamped with the run id that stored it (`run_id`), so an engine can tell reuse within one
    execution (part of a fresh run) from reuse of an earlier execution's result (`origin`). `sizer` says how many
    bytes an entry is charged (default: its tensor bytes).
    """

    def __init__(self, max_bytes: int, max_entries: int = MAX_ENTRIES, sizer: Sizer = tensor_bytes):
        self.max_bytes = max_bytes
        self.max_entries = max_entries  # tensor-free entries (scores) weigh 0 bytes: the count bounds them
        self.sizer = sizer
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._pinned: dict[str, list[tuple[Hashable, Any]]] = {}  # slot -> [(key, value)], newest last
        self._origin: dict[Hashable, str] = {}  # key -> run id that stored it (entries alive in data or pins)
        self.bytes = 0
        self.stats = MemoStats()

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

    def pin(self, slot: str, key: Hashable, value: Any, keep: int = 1, run_id: str = "") -> Any:
        """Hold `value` under `key` in `slot` for the running generation (the slot keeps its newest `keep`
        entries), outside the byte budget; it also goes into the LRU when it fits."""
        self.hold(slot, key, value, keep, run_id)
        return self.put(key, value, run_id)

    def hold(self, slot: str, key: Hashable, value: Any, keep: int = 1, run_id: str = "") -> Any:
        """`pin` without the LRU copy."""
        if keep < 1:
            raise ValueError(f"a held slot keeps at least one entry, got keep={keep}")
        entries = [(k, v) for k, v in self._pinned.get(slot, []) if k != key]
        entries.append((key, value))
        for k, _ in entries[:-keep]:
            self._forget_origin(k, dropping_slot=slot)
        self._pinned[slot] = entries[-keep:]
        self._origin[key] = run_id
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

    def put(self, key: Hashable, value: Any, run_id: str = "") -> Any:
        """Store and return `value`; a value larger than the whole budget is returned but not kept."""
        size = self.sizer(key, value)
        if key in self._data:
            self.bytes -= self._data.pop(key)[1]
        self._origin[key] = run_id
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

    def evict(self, nbytes: int) -> int:
        """Drop least-recently-used entries worth at least `nbytes` (or all of them), keeping the budget (a host
        that needs the memory back); returns the bytes dropped. Held entries stay: `release_run` drops those."""
        before = self.bytes
        self._evict_to(max(before - nbytes, 0))
        return before - self.bytes

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
    """Two LRU memoiser: small entries (drafts, target blocks, scores, anchors) apart from big ones (KV/decoder caches).

    With one byte-budgeted LRU, a single multi-GB cache at 832x480 evicts every small entry of the earlier
    blocks, and a re-run after moving tau recomputes from block 0. Keeping the small entries in their own budget
    means a re-run always finds the decisions' inputs of the unchanged prefix; big caches are only recomputed.
    Same interface as `Memo` (an Engine accepts either).
    """

    def __init__(self, large_bytes: int, small_bytes: int = SMALL_TIER_BYTES, small_entry_max: int = SMALL_ENTRY_MAX,
                 sizer: Sizer = tensor_bytes):
        self.small = Memo(small_bytes, sizer=sizer)
        self.large = Memo(large_bytes, sizer=sizer)
        self.small_entry_max = small_entry_max

    @staticmethod
    def split(total_bytes: int, sizer: Sizer = tensor_bytes) -> "TieredMemo":
        """One budget shared out: a quarter (at most SMALL_TIER_BYTES) for the small tier, the rest for caches."""
        small = min(total_bytes // SMALL_TIER_SHARE, SMALL_TIER_BYTES)
        return TieredMemo(total_bytes - small, small_bytes=small, sizer=sizer)

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

    def hold(self, slot: str, key: Hashable, value: Any, keep: int = 1, run_id: str = "") -> Any:
        return self.large.hold(slot, key, value, keep, run_id)

    def _tiers(self, key: Hashable, value: Any) -> tuple[Memo, Memo]:
        """(the tier this value belongs to, the other one)."""
        small = self.large.sizer(key, value) <= self.small_entry_max
        return (self.small, self.large) if small else (self.large, self.small)

    def put(self, key: Hashable, value: Any, run_id: str = "") -> Any:
        tier, other = self._tiers(key, value)
        other._drop(key)
        return tier.put(key, value, run_id)

    def pin(self, slot: str, key: Hashable, value: Any, keep: int = 1, run_id: str = "") -> Any:
        """Held entries of every size live in the large tier's slots (outside both budgets)."""
        self.large.hold(slot, key, value, keep, run_id)
        return self.put(key, value, run_id)

    def origin(self, key: Hashable) -> str:
        return self.small.origin(key) or self.large.origin(key)

    def release_run(self) -> int:
        return self.small.release_run() + self.large.release_run()

    @property
    def pinned_bytes(self) -> int:
        return self.small.pinned_bytes + self.large.pinned_bytes

    def resize(self, large_bytes: int, small_bytes: int | None = None) -> None:
        self.large.resize(large_bytes)
        if small_bytes is not None:
            self.small.resize(small_bytes)

    def evict(self, nbytes: int) -> int:
        """`Memo.evict` over both tiers: the big entries (caches, pixels) first, then the small ones."""
        freed = self.large.evict(nbytes)
        return freed + (self.small.evict(nbytes - freed) if freed < nbytes else 0)

    def clear(self) -> None:
        self.small.clear()
        self.large.clear()

    def kinds(self) -> dict[str, int]:
        out = self.small.kinds()
        for k, v in self.large.kinds().items():
            out[k] = out.get(k, 0) + v
        return out


# ---------------------------------------------------------------------------------------------------------------
# The one owner of the engine's entries: envelope, run-id stamps and credit-once
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """What the engine stores under a key: a result and the work computing it took (what a reuse credits)."""

    value: Any
    cost: Mapping[str, int]


@dataclass(frozen=True)
class Hold:
    """Keep an entry for the running generation outside the memo's budget: the newest `keep` entries of `slot`.
    `lru`: also offer it to the LRU for later runs (False for a live view a later block overwrites in place)."""

    slot: str
    keep: int = 1
    lru: bool = True


class Memoiser:
    """Computes or reuses derived results by key, the only code that reads or writes the engine's memo entries.

    A reuse records its label (and whether an earlier execution computed it) and credits the cost stored with the
    entry, once per operation: a result the operation computed itself, or already credited, is not credited again.
    A computation's cost is what it charged to the part of the operation's tally it was given. Entries are stamped
    with the operation's run id.
    """

    def __init__(self, memo: Memo | TieredMemo):
        self.memo = memo

    def memoised(self, key: Hashable, label: str | None, tally: Tally, compute: Callable[[Tally], Any], *,
                 hold: Hold | None = None, hold_on_reuse: bool = False) -> Any:
        """The result under `key`: reused (`label` names it in the record; None: not recorded nor credited, for
        results a fresh run reuses too), else `compute(part)` stored with the part's cost (held when `hold`, again
        on a reuse with `hold_on_reuse`)."""
        entry = self.memo.get(key)
        if entry is not None:
            if label is not None:
                self._reused(key, label, entry, tally)
            if hold_on_reuse:
                self._store(key, entry, hold, tally.run_id)
            return entry.value
        part = tally.part()
        value = compute(part)
        tally.include(part)
        return self.keep(key, value, tally, cost=part.cost, hold=hold)

    def recall(self, keys: tuple[Hashable, ...], label: str, tally: Tally,
               hold_again: tuple[tuple[int, Hold], ...] = ()) -> tuple[Any, ...] | None:
        """The values under `keys` when every one is there (one lookup each, in order), else None. The first is the
        result reused (recorded and credited); `hold_again` (index, hold) holds entries again for this run, in order."""
        entries = tuple(self.memo.get(k) for k in keys)
        if any(e is None for e in entries):
            return None
        self._reused(keys[0], label, entries[0], tally)
        for i, hold in hold_again:
            self._store(keys[i], entries[i], hold, tally.run_id)
        return tuple(e.value for e in entries)

    def peek(self, key: Hashable) -> Any | None:
        """The value under `key` (None when absent), neither recorded nor credited: a result a fresh run has too."""
        entry = self.memo.get(key)
        return None if entry is None else entry.value

    def keep(self, key: Hashable, value: Any, tally: Tally | None, *, cost: Mapping[str, int] | None = None,
             hold: Hold | None = None) -> Any:
        """Store `value`, computed now by the operation (`tally`, None outside one) at `cost`; returns it."""
        self._store(key, Entry(value, {k: n for k, n in (cost or {}).items() if n}), hold,
                    tally.run_id if tally is not None else "")
        if tally is not None:
            tally.counted.add(key)
        return value

    def keeps(self, nbytes: int) -> bool:
        return self.memo.keeps(nbytes)

    def extend(self, key_at: Callable[[int], Hashable], b: int, label: str, tally: Tally, *,
               usable: Callable[[Any], bool], start: Callable[[Tally], Any], step: Callable[[int, Any, Tally], Any],
               hold: Hold, snapshot: Callable[[Any], Any]) -> Any:
        """A chain of results, link j+1 made from link j by `step(j, value, part)` (a KV view after block j's
        commit): link b, from the newest usable memoised link (`start(part)` makes link 0 when none is). Links are live
        views a later link overwrites in place: each new one is held (`hold`, never in the LRU) and, when the budget
        keeps its bytes, a `snapshot` of it goes to the LRU for later runs.

        Cost: reusing link b credits its entry. A link that is there but not usable (its slots were overwritten by
        a later block of its branch) is one a fresh run would have had: the links rebuilt before it count as work
        only, and when it is link b its cost is credited."""
        j, found, lost = b, None, None
        while j >= 0:
            entry = self.memo.get(key_at(j))
            if entry is not None and usable(entry.value):
                found = entry
                break
            if entry is not None and lost is None:
                lost = (j, entry)
            j -= 1
        if found is not None:
            value = found.value
        else:
            part = tally.part()
            j, value = 0, start(part)
            tally.include(part)
            cost = {name: n for name, n in part.cost.items() if n}
            self.memo.hold(hold.slot, key_at(0), Entry(value, cost), hold.keep, tally.run_id)
            if cost and self.memo.keeps(value.nbytes):  # link 0 holds work (given latents): offer it for later runs
                self.memo.put(key_at(0), Entry(snapshot(value), cost), tally.run_id)
            tally.counted.add(key_at(0))
        if j == b and b > 0:
            self._reused(key_at(b), label, found, tally)
        fresh_from = j if lost is None else lost[0]
        if lost is not None and lost[0] == b and b > 0:
            self._credit(key_at(b), lost[1], tally)
        for k in range(j, b):
            part = tally.part()
            value = step(k, value, part)
            for name, n in part.work.items():
                (tally.add if k >= fresh_from else tally.rebuilt)(name, n)
            key, cost = key_at(k + 1), {name: n for name, n in part.cost.items() if n}
            self.memo.hold(hold.slot, key, Entry(value, cost), hold.keep, tally.run_id)
            if self.memo.keeps(value.nbytes):
                self.memo.put(key, Entry(snapshot(value), cost), tally.run_id)
            tally.counted.add(key)
        return value

    def snapshotted(self, key: Hashable, label: str, tally: Tally, compute: Callable[[Tally], Any], *,
                    snapshot: Callable[[Any], Any], restore: Callable[[Any], Any]) -> Any:
        """`memoised` for a result that lives in storage the run overwrites (a KV view of the run's buffer): the memo
        keeps `snapshot(value)` (when its budget can), and a reuse returns `restore(snapshot)` (put back into that
        storage). Cost and credit as `memoised`."""
        entry = self.memo.get(key)
        if entry is not None:
            self._reused(key, label, entry, tally)
            return restore(entry.value)
        part = tally.part()
        value = compute(part)
        tally.include(part)
        if self.memo.keeps(value.nbytes):
            self.memo.put(key, Entry(snapshot(value), {k: n for k, n in part.cost.items() if n}), tally.run_id)
        tally.counted.add(key)
        return value

    def _reused(self, key: Hashable, label: str, entry: Entry, tally: Tally) -> None:
        tally.reuse(label, self.memo.origin(key))
        self._credit(key, entry, tally)

    @staticmethod
    def _credit(key: Hashable, entry: Entry, tally: Tally) -> None:
        """Credit a reused entry's cost, once per operation."""
        if key not in tally.counted:
            tally.counted.add(key)
            tally.credit(entry.cost)

    def _store(self, key: Hashable, entry: Entry, hold: Hold | None, run_id: str) -> None:
        if hold is None:
            self.memo.put(key, entry, run_id)
        elif hold.lru:
            self.memo.pin(hold.slot, key, entry, hold.keep, run_id)
        else:
            self.memo.hold(hold.slot, key, entry, hold.keep, run_id)
