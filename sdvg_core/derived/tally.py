"""Work and cost accounting of a block: forwards, decoded frames, scored frames and seconds per phase.

`Account` is the one immutable value that carries them (work, cost, seconds, reused, carried) from an operation
to the pending block and on to the committed record; two accounts add with `+`. `Tally` is the mutable scratch
one operation fills and freezes with `account()`.

`work` is what a call computed; `cost` adds the work of results taken from the memo (credited with the cost
recorded when they were computed), i.e. what the block costs in a fresh run: the basis of counted speedups
(docs/design.md §5). Crediting a memoised result is the memo's business (memo.Memoiser); a Tally only adds.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Hashable, Iterator, Mapping, TypeVar

import torch

# input: reading + encoding given pixels; route_decode: a routing decoder other than the output VAE (engine.py)
PHASES = ("input", "context", "draft", "decode", "score", "target", "route_decode")
# route_decode_frames: latent frames a routing decoder other than the output VAE decoded (its drafts and its own
# stream of the committed blocks); with the default routing the VAE decodes the drafts, counted in vae_decode_frames
WORK_KEYS = ("drafter_forwards", "target_forwards", "drafter_context_forwards", "target_context_forwards",
             "vae_decode_frames", "vae_encodes", "scored_frames", "route_decode_frames")

V = TypeVar("V", int, float)


class Counts(Mapping[str, V]):
    """An immutable name -> number mapping (work, cost, seconds of a block): a frozen record stays frozen.

    Reads like a dict (`c["drafter_forwards"]`, `c.get(...)`, `dict(c)`), compares equal to any mapping with
    the same items, hashes, pickles; it has no way to be changed after creation.
    """

    __slots__ = ("_items",)

    def __init__(self, data: Mapping[str, V] | None = None):
        object.__setattr__(self, "_items", tuple((str(k), v) for k, v in (data or {}).items()))

    def __setattr__(self, name, value):
        raise AttributeError("Counts is immutable")

    def __getitem__(self, key: str) -> V:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items))

    def __reduce__(self):
        return (Counts, (dict(self._items),))

    def __repr__(self) -> str:
        return f"Counts({dict(self._items)!r})"

    def __add__(self, other: Mapping[str, V]) -> "Counts":
        """Item-wise sum; names in this one's order, then the other's new ones."""
        return Counts({k: self.get(k, 0) + other.get(k, 0) for k in dict.fromkeys([*self, *other])})


def counts(c: Mapping | None) -> Counts:
    return c if isinstance(c, Counts) else Counts(c)


@dataclass(frozen=True)
class Account:
    """What operations on one block computed (`work`), what they cost in a fresh run (`cost`), their seconds per
    phase, the memoised results they reused and which of those an earlier execution computed (`carried`)."""

    work: Counts = Counts()
    cost: Counts = Counts()
    seconds: Counts = Counts()
    reused: tuple[str, ...] = ()  # every result taken from the memo
    carried: tuple[str, ...] = ()  # those an earlier execution computed (so the time is not a fresh run's)

    def __post_init__(self):
        for name in ("work", "cost", "seconds"):
            object.__setattr__(self, name, counts(getattr(self, name)))
        object.__setattr__(self, "reused", tuple(self.reused))
        object.__setattr__(self, "carried", tuple(self.carried))

    def __add__(self, other: "Account") -> "Account":
        return Account(self.work + other.work, self.cost + other.cost, self.seconds + other.seconds,
                       self.reused + other.reused, self.carried + other.carried)


class Tally:
    """Mutable scratch for one operation; frozen into an Account (`account()`) when the operation ends."""

    def __init__(self, sync_cuda: bool = False, run_id: str = ""):
        self.work = dict.fromkeys(WORK_KEYS, 0)
        self.cost = dict.fromkeys(WORK_KEYS, 0)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.reused: list[str] = []
        self.carried: list[str] = []
        self.run_id = run_id  # the execution computing now: stamps what it stores, tells reuse from carry-over
        self._sync = sync_cuda and torch.cuda.is_available()
        self.counted: set[Hashable] = set()  # memo keys whose cost this operation already holds (memo.Memoiser)

    def part(self) -> "Tally":
        """Scratch for a part of this operation whose cost is recorded on its own (a memoised computation): same
        run id and timing, and the same set of memo keys already counted."""
        sub = Tally(run_id=self.run_id)
        sub._sync, sub.counted = self._sync, self.counted
        return sub

    def add(self, key: str, n: int = 1) -> None:
        """Work computed now: counts in both `work` and `cost`."""
        self.work[key] += n
        self.cost[key] += n

    def rebuilt(self, key: str, n: int) -> None:
        """Work computed now that a fresh run would not do (rebuilding what was lost): `work` only."""
        self.work[key] += n

    def credit(self, cost: Mapping[str, int]) -> None:
        """Work a fresh run does that this call did not (a result reused): counts toward `cost` only."""
        for k, v in cost.items():
            self.cost[k] = self.cost.get(k, 0) + v

    def reuse(self, label: str, origin: str) -> None:
        """A result named `label` was reused; `origin` is the run id that computed it. Reuse within this execution
        is part of a fresh run (block 2 reusing the anchor block 1 made); only an earlier execution's result makes
        the time not fresh."""
        self.reused.append(label)
        if origin != self.run_id or not origin:
            self.carried.append(label)

    def include(self, part: "Tally") -> None:
        """Add a part's work, cost, seconds and reuse (see `part`)."""
        for k, v in part.work.items():
            self.work[k] = self.work.get(k, 0) + v
        self.credit(part.cost)
        for k, v in part.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.reused.extend(part.reused)
        self.carried.extend(part.carried)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; with `sync_cuda` the device is synchronised at both ends so GPU time lands here."""
        if self._sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._sync:
                torch.cuda.synchronize()
            self.seconds[name] += time.perf_counter() - t0

    def account(self) -> Account:
        return Account(self.work, self.cost, self.seconds, tuple(self.reused), tuple(self.carried))
