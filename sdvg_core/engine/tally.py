"""Work and cost accounting for one block: forwards, decoded frames, scored frames and seconds per phase.

`work` is what this call computed; `cost` adds the work of results taken from the memo (credited with the
cost recorded when they were computed), i.e. what the block costs in a fresh run: the basis of counted
speedups (docs/design.md §5).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch

PHASES = ("context", "draft", "decode", "score", "target")
WORK_KEYS = ("drafter_forwards", "target_forwards", "drafter_context_forwards", "target_context_forwards",
             "vae_decode_frames", "vae_encodes", "scored_frames")


class Tally:
    """Mutable scratch for one operation; frozen into a PendingBlock or BlockRecord when the operation ends."""

    def __init__(self, sync_cuda: bool = False, run_id: str = ""):
        self.work = dict.fromkeys(WORK_KEYS, 0)
        self.cost = dict.fromkeys(WORK_KEYS, 0)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.reused: list[str] = []  # every result taken from the memo
        self.carried: list[str] = []  # those an earlier execution computed (so the time is not a fresh run's)
        self.run_id = run_id
        self._sync = sync_cuda and torch.cuda.is_available()
        self._counted: set = set()  # memo keys whose cost this tally already holds

    def reuse(self, label: str, origin: str) -> None:
        """A result named `label` was taken from the memo; `origin` is the run id that computed it. Reuse within
        this execution is part of a fresh run (block 2 reusing the anchor block 1 made); only an earlier
        execution's result makes the time not fresh."""
        self.reused.append(label)
        if origin != self.run_id or not origin:
            self.carried.append(label)

    def computed(self, key) -> None:
        """The result under `key` was computed by this operation: its cost is already counted here."""
        self._counted.add(key)

    def credit_entry(self, key, cost: Mapping[str, int]) -> None:
        """Credit a memoised result's cost, once per operation (the same block may look it up twice)."""
        if key not in self._counted:
            self._counted.add(key)
            self.credit(cost)

    def add(self, key: str, n: int = 1) -> None:
        """Work computed now: counts in both `work` and `cost`."""
        self.work[key] += n
        self.cost[key] += n

    def credit(self, cost: Mapping[str, int]) -> None:
        """A result taken from the memo: its recorded cost counts toward the fresh-run cost only."""
        for k, v in cost.items():
            self.cost[k] = self.cost.get(k, 0) + v

    def cost_since(self, before: Mapping[str, int]) -> dict[str, int]:
        return {k: v - before.get(k, 0) for k, v in self.cost.items() if v != before.get(k, 0)}

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

    def absorb(self, work: Mapping[str, int], cost: Mapping[str, int], seconds: Mapping[str, float],
               reused: tuple[str, ...], carried: tuple[str, ...] = ()) -> None:
        """Add what earlier operations on the same block recorded (draft, decode, score -> route)."""
        for k, v in work.items():
            self.work[k] = self.work.get(k, 0) + v
        self.credit(cost)
        for k, v in seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.reused.extend(reused)
        self.carried.extend(carried)
