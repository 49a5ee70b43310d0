"""Derived per-prompt and per-history data of a Wan DiT: cross-attention text K/V and the self-attention KV cache.

The KV cache is one preallocated buffer of `window_frames` latent-frame slots per layer. The first `sink_frames`
slots are the sink (the first frames ever written stay there); the others are a ring whose oldest frames are
evicted when a new block would not fit. A `KVCache` is an immutable *view*: which slots hold this history, in
which logical order (sink first, then the window oldest to newest). Every change is one of its operations, each
a `KVWrite` plan that a forward opens, writes layer by layer and, for a commit, turns into the new view:

- `append(n)`: a call's n new frames go after the view; when the window would overflow, the oldest window
  frames are evicted first (LongLive: `local_attn_size` including the sink; every call of a block evicts the
  same frames, so eviction happens once per block);
- `rewrite(n, keep_sink)`: the view's newest n frames recomputed in place (LongLive's recache at a prompt switch);
- `evict(n)`: drop the oldest n window frames (logical only: no data moves).

A forward writes and attends through device data of a fixed shape (`OpenKVWrite.inputs`, static shapes for
torch.compile and CUDA graphs): the call's keys/values go to the token positions of a `write index`, and attention
reads a fixed `span` of the buffer (its whole capacity once the window filled; while it fills, the smallest of
capacity, capacity/2, capacity/4... frames that holds the occupied slots, so a whole-video cache does not attend
to its empty future) with the empty slots masked out by an additive mask (None when every slot of the span is
occupied). Both live in buffers made once per buffer and call shape and refilled in place, so a different block
changes data, never shapes. Physical order does not change the function with RoPE baked into the keys; in the
`slot` RoPE mode (LongLive's infinity variant) keys are stored un-rotated and rotated by their LOGICAL slot index
at every call (the dit fills that table per call, `OpenKVWrite.slot_positions`).

Views never read stale data (docs/design.md §3.2): each slot carries the write clock of its last write, a view
records the clocks of its slots, and reading a view one of whose slots was overwritten since raises
`StaleKVError` (a recipe checks `valid_for` first and treats such a view as a memo miss). Writing from a view
that another branch committed past copies the slots the call reads into a fresh buffer first (a fork), so the
other branch's committed views stay intact; a linear run never forks and moves no cached data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .wan_config import WanDiTConfig

ROPE_MODES = ("baked", "slot")  # keys stored after RoPE at their write position / un-rotated, rotated by slot
MASKED = float("-inf")  # additive attention mask of an empty slot (0 for an occupied one)


def attention_span(extent: int, capacity: int) -> int:
    """Frame slots attention reads when the occupied slots end at slot `extent`: the smallest of capacity,
    ceil(capacity / 2), ceil(capacity / 4)... that holds them. A bounded set of shapes per buffer (at most
    log2(capacity) + 1: one graph each under torch.compile), at most twice the occupied slots' work, and the whole
    buffer once the window is full (a windowed cache's steady state is one shape)."""
    span = capacity
    while span > 1 and -(-span // 2) >= extent:
        span = -(-span // 2)
    return span


class StaleKVError(RuntimeError):
    """A KV cache view was read after one of its slots was overwritten (by a later block of its branch)."""


@dataclass(frozen=True)
class TextKV:
    """Cross-attention keys/values of one prompt for every layer, [B, heads, text_len, head_dim] each.

    Computed once per prompt and model, reused for every block and step (the text never changes).
    """

    k: tuple[torch.Tensor, ...]
    v: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


@dataclass
class KVCopyStats:
    """Counts the cached data KV views copy (forks on a branch switch; restores of a memoised snapshot into a run's
    buffer): an instrumentation hook a caller installs on the caches it makes (`KVCache.empty(copies=...)`,
    `Engine(kv_copies=...)`); every fork and restore of them counts here."""

    forks: int = 0
    fork_bytes: int = 0
    restores: int = 0
    restore_bytes: int = 0

    def reset(self) -> None:
        self.forks = self.fork_bytes = self.restores = self.restore_bytes = 0


@dataclass(frozen=True)
class KVInputs:
    """What one call's layers read from the cache, as device data of a fixed shape per call shape: the buffer
    token positions its new keys/values go to (`index` [W] int64, the call's tokens from `skip` on), the tokens
    attention reads (`span`: a prefix of the buffer) and the additive mask of that span's empty slots
    ([1, 1, 1, span] in the buffer's dtype; None when every slot of the span is occupied). The tensors are the
    buffer's, refilled in place by every call of that shape (what a CUDA graph replays)."""

    index: torch.Tensor
    skip: int
    span: int
    mask: torch.Tensor | None


class _KVBuffer:
    """Preallocated per-layer key/value storage [L][B, heads, window_frames * tokens_per_frame, head_dim].

    `stamps[p]` is the write clock of physical frame slot p's last write (0: never written); `frontier` counts the
    commits made on this buffer (a view made before the newest commit is not the tip of its branch).
    """

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], tokens_per_frame: int, sink_frames: int = 0,
                 rope: str = "baked", copies: KVCopyStats | None = None):
        self.k, self.v = k, v
        self.tokens_per_frame, self.sink_frames, self.rope = tokens_per_frame, sink_frames, rope
        self.copies = copies  # where this buffer's forks are counted (None: nowhere)
        self.stamps = [0] * (k[0].shape[2] // tokens_per_frame)
        self.clock = 0
        self.frontier = 0
        self._static: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # (W, span) -> (index, mask)
        self._arange: torch.Tensor | None = None  # token positions 0..capacity-1 on the device (index source)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def frames(self) -> int:
        return len(self.stamps)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def like(self) -> "_KVBuffer":
        """An empty buffer of the same shape, sink, RoPE mode and copy counter."""
        return _KVBuffer([torch.zeros_like(t) for t in self.k], [torch.zeros_like(t) for t in self.v],
                         self.tokens_per_frame, self.sink_frames, self.rope, self.copies)

    def static(self, written: int, span: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(write index [written], mask [1, 1, 1, span], positions 0..capacity-1) on the buffer's device, made once
        per call shape and refilled in place by each call (their storage never changes: CUDA-graph inputs)."""
        k = self.k[0]
        if self._arange is None:
            self._arange = torch.arange(self.capacity, dtype=torch.long, device=k.device)
        hit = self._static.get((written, span))
        if hit is None:
            hit = self._static[(written, span)] = (torch.zeros(written, dtype=torch.long, device=k.device),
                                                   torch.zeros(1, 1, 1, span, dtype=k.dtype, device=k.device))
        return hit[0], hit[1], self._arange

    def stamp(self, slots: tuple[int, ...]) -> int:
        """A new write clock value, recorded on `slots` (physical frame slots about to be written)."""
        self.clock += 1
        for p in slots:
            self.stamps[p] = self.clock
        return self.clock


def _runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(source slot, destination slot) pairs -> (source, destination, count) runs of consecutive slots."""
    runs: list[list[int]] = []
    for a, b in pairs:
        if runs and runs[-1][0] + runs[-1][2] == a and runs[-1][1] + runs[-1][2] == b:
            runs[-1][2] += 1
        else:
            runs.append([a, b, 1])
    return [(a, b, n) for a, b, n in runs]


@dataclass(frozen=True)
class _Plan:
    """A resolved operation on a view: the result's layout and where each of its logical slots comes from."""

    sink_len: int
    ring_start: int
    ring_len: int
    frame_ids: tuple[int, ...]  # of the result, logical order
    source: tuple[int | None, ...]  # per result slot: the base's logical slot it keeps, or None (written by the call)
    frames: int  # frames the call processes (queries); the written ones are its last len(written)

    @property
    def written(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.source) if s is None)

    @property
    def reads(self) -> tuple[int, ...]:
        return tuple(s for s in self.source if s is not None)


@dataclass(frozen=True)
class KVCache:
    """An immutable view of a KV buffer: `frame_ids[i]` is the latent frame in logical slot i (sink, then window).

    Keys are stored after q/k RMSNorm and, in the `baked` RoPE mode, after RoPE at their frame position; values as
    projected. A forward writes through `append` / `rewrite` plans; a commit returns a *new* view.
    """

    buffer: _KVBuffer
    sink_len: int = 0  # sink slots in use (== sink_frames once the first sink_frames frames were written)
    ring_start: int = 0  # ring index of the oldest window frame
    ring_len: int = 0  # window frames
    frame_ids: tuple[int, ...] = ()
    stamps: tuple[int, ...] = ()  # write clock of each logical slot when the view was made
    serial: int = 0  # buffer.frontier when the view was made
    _forks: dict = field(default_factory=dict, compare=False, repr=False)  # this view's fork (branch switch), reused

    @staticmethod
    def empty(cfg: WanDiTConfig, *, batch: int, window_frames: int, tokens_per_frame: int,
              device: torch.device | str, dtype: torch.dtype, sink_frames: int = 0, rope: str = "baked",
              copies: KVCopyStats | None = None) -> "KVCache":
        """Allocate `window_frames` latent-frame slots (e.g. 6 = 9360 tokens at 832x480, Krea's window), the first
        `sink_frames` of them a sink; `rope`: "baked" (keys stored rotated) or "slot" (rotated by slot per call);
        `copies`: where the forks of this cache and of the views made from it are counted."""
        if rope not in ROPE_MODES:
            raise ValueError(f"KV RoPE mode must be one of {ROPE_MODES}, got {rope!r}")
        if not 0 <= sink_frames < window_frames:
            raise ValueError(f"a KV sink of {sink_frames} frames needs a window of more frames, got {window_frames}")
        shape = (batch, cfg.num_heads, window_frames * tokens_per_frame, cfg.head_dim)
        k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)]
        v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.num_layers)]
        return KVCache(_KVBuffer(k, v, tokens_per_frame, sink_frames, rope, copies))

    # -- sizes ---------------------------------------------------------------------------------------------
    @property
    def tokens_per_frame(self) -> int:
        return self.buffer.tokens_per_frame

    @property
    def frames(self) -> int:
        return len(self.frame_ids)

    @property
    def length(self) -> int:
        """Tokens this view holds."""
        return self.frames * self.tokens_per_frame

    @property
    def capacity(self) -> int:
        """Tokens the buffer holds."""
        return self.buffer.capacity

    @property
    def window_frames(self) -> int:
        return self.buffer.frames

    @property
    def sink_frames(self) -> int:
        return self.buffer.sink_frames

    @property
    def rope(self) -> str:
        return self.buffer.rope

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    # -- logical -> physical -------------------------------------------------------------------------------
    def _phys(self, sink_len: int, ring_start: int, i: int) -> int:
        s = self.buffer.sink_frames
        if i < sink_len:
            return i
        return s + (ring_start + i - sink_len) % (self.buffer.frames - s)

    def physical(self, i: int) -> int:
        """Physical frame slot of logical slot i."""
        return self._phys(self.sink_len, self.ring_start, i)

    def physical_slots(self) -> tuple[int, ...]:
        return tuple(self.physical(i) for i in range(self.frames))

    def _stale(self, logical) -> list[int]:
        st = self.buffer.stamps
        return [i for i in logical if st[self.physical(i)] != self.stamps[i]]

    @property
    def valid(self) -> bool:
        """Every slot of the view still holds what it held when the view was made."""
        return not self._stale(range(self.frames))

    def valid_for(self, new_frames: int) -> bool:
        """What a call appending `new_frames` reads (the sink and the window after eviction) is intact."""
        return not self._stale(self._plan_append(new_frames, -1).reads)

    def _require(self, logical, what: str) -> None:
        bad = self._stale(logical)
        if bad:
            raise StaleKVError(f"{what}: KV slots of frames {[self.frame_ids[i] for i in bad]} were overwritten "
                               f"since this view was made (a later block of its branch reused them)")

    # -- operations ----------------------------------------------------------------------------------------
    def _plan_append(self, n: int, first_frame: int) -> _Plan:
        s, c = self.buffer.sink_frames, self.buffer.frames
        if n > c - s:
            raise ValueError(f"a call of {n} frames does not fit a KV window of {c} frames with a sink of {s}")
        L = self.frames
        e = max(0, L + n - c)  # evict the oldest window frames (never the sink)
        ids = self.frame_ids[:self.sink_len] + self.frame_ids[self.sink_len + e:]
        source = tuple(range(self.sink_len)) + tuple(range(self.sink_len + e, L))
        new_ids = tuple(first_frame + j if first_frame >= 0 else -1 for j in range(n))
        if self.sink_len < s:  # filling the sink (no window yet): contiguous from slot 0
            total = L + n
            sink_len, ring_start, ring_len = min(s, total), 0, max(0, total - s)
        else:
            ring = c - s
            sink_len, ring_start, ring_len = s, (self.ring_start + e) % ring, self.ring_len - e + n
        return _Plan(sink_len, ring_start, ring_len, ids + new_ids, source + (None,) * n, n)

    def _plan_rewrite(self, n: int, first_frame: int, keep_sink: bool) -> _Plan:
        L = self.frames
        if not 0 < n <= L:
            raise ValueError(f"a rewrite of {n} frames needs a view holding at least that many (it holds {L})")
        start = L - n  # the call's frames are the view's newest n
        write_from = max(start, self.sink_len) if keep_sink else start
        ids = list(self.frame_ids)
        for i in range(write_from, L):
            ids[i] = first_frame + (i - start)
        source = tuple(None if i >= write_from else i for i in range(L))
        return _Plan(self.sink_len, self.ring_start, self.ring_len, tuple(ids), source, n)

    def append(self, n: int, first_frame: int = -1) -> "KVWrite":
        """Plan: a call's n new frames (latent frames first_frame.. of the video) go after this view, the oldest
        window frames evicted first when the window would overflow; the call attends to sink + window + itself."""
        self._plan_append(n, first_frame)  # refuse a call that cannot fit now
        return KVWrite(self, ("append", n, first_frame))

    def rewrite(self, n: int, first_frame: int, *, keep_sink: bool = False) -> "KVWrite":
        """Plan: recompute this view's newest n slots in place from a call over frames first_frame..+n-1 (a recache).
        With keep_sink, sink slots are not rewritten: the call's frames that map onto them only query."""
        self._plan_rewrite(n, first_frame, keep_sink)
        return KVWrite(self, ("rewrite", n, first_frame, keep_sink))

    def evict(self, n: int) -> "KVCache":
        """The view without its oldest n window frames (the sink stays; nothing is moved or copied)."""
        if not 0 <= n <= self.ring_len:
            raise ValueError(f"cannot evict {n} frames from a window of {self.ring_len}")
        if n == 0:
            return self
        ring = self.buffer.frames - self.buffer.sink_frames
        keep = tuple(range(self.sink_len)) + tuple(range(self.sink_len + n, self.frames))
        return KVCache(self.buffer, self.sink_len, (self.ring_start + n) % ring, self.ring_len - n,
                       tuple(self.frame_ids[i] for i in keep), tuple(self.stamps[i] for i in keep), self.serial)

    # -- reading (tests and traces; the forward attends through a plan) -----------------------------------
    def _token_index(self, slots: tuple[int, ...]) -> torch.Tensor | slice:
        tpf = self.tokens_per_frame
        if slots == tuple(range(len(slots))):
            return slice(0, len(slots) * tpf)
        idx = torch.tensor([p * tpf + t for p in slots for t in range(tpf)], dtype=torch.long)
        return idx.to(self.buffer.k[0].device)

    def _gather(self, t: torch.Tensor, slots: tuple[int, ...]) -> torch.Tensor:
        index = self._token_index(slots)
        return t[:, :, index] if isinstance(index, slice) else t.index_select(2, index)

    def keys(self, layer: int) -> torch.Tensor:
        """Keys of layer `layer` in logical slot order, [B, heads, length, head_dim] (a copy once the ring wrapped)."""
        self._require(range(self.frames), "keys")
        return self._gather(self.buffer.k[layer], self.physical_slots())

    def values(self, layer: int) -> torch.Tensor:
        self._require(range(self.frames), "values")
        return self._gather(self.buffer.v[layer], self.physical_slots())

    def clone(self) -> "KVCache":
        """A deep copy on a private buffer (same physical layout): the memo's snapshot of a view for later runs (the
        live view's slots are overwritten as its ring wraps), and for tests that must not disturb the original."""
        src = self.buffer
        buf = _KVBuffer([t.clone() for t in src.k], [t.clone() for t in src.v], src.tokens_per_frame,
                        src.sink_frames, src.rope, src.copies)
        buf.stamps, buf.clock, buf.frontier = list(src.stamps), src.clock, src.frontier
        return KVCache(buf, self.sink_len, self.ring_start, self.ring_len, self.frame_ids, self.stamps, self.serial)

    def _fork(self, reads: tuple[int, ...]) -> "KVCache":
        """This view's layout on a fresh buffer holding copies of the logical slots `reads` (the others are about to
        be written): a branch switch. Reused by later calls from this view until something commits on it."""
        key = reads
        hit = self._forks.get(key)
        if hit is not None and hit.buffer.frontier == hit.serial:
            return hit
        buf = self.buffer.like()
        view = self._copy_slots(buf, reads)
        if buf.copies is not None:
            buf.copies.forks += 1
            buf.copies.fork_bytes += self._slot_bytes(len(reads))
        self._forks.clear()
        self._forks[key] = view
        return view

    def restore_into(self, buffer: _KVBuffer) -> "KVCache":
        """This view copied into `buffer` (one of the same layout: a run's own buffer), compacted as a fork lays it
        out, as that buffer's newest view: a memoised snapshot put back where the run's calls write and attend, so
        a run keeps one KV storage whatever it reuses. Views of `buffer` whose slots it overwrites go stale."""
        src = self.buffer
        if (buffer.capacity, buffer.tokens_per_frame, buffer.sink_frames, buffer.rope) != \
                (src.capacity, src.tokens_per_frame, src.sink_frames, src.rope):
            raise ValueError("a KV view is restored only into a buffer of its own layout")
        reads = tuple(range(self.frames))
        self._require(reads, "a KV restore")
        view = self._copy_slots(buffer, reads)
        if buffer.copies is not None:
            buffer.copies.restores += 1
            buffer.copies.restore_bytes += self._slot_bytes(len(reads))
        return view

    def _slot_bytes(self, n: int) -> int:
        """Bytes of n frame slots' keys and values over every layer."""
        tpf = self.tokens_per_frame
        return n * tpf * sum(t.shape[0] * t.shape[1] * t.shape[3] * t.element_size() for t in self.buffer.k + self.buffer.v)

    def _copy_slots(self, buf: _KVBuffer, reads: tuple[int, ...]) -> "KVCache":
        """This view's layout on `buf`, compacted (logical slot i at physical slot i: sink first, then the window from
        ring start 0), holding copies of the logical slots `reads` (the others about to be written); the view is
        `buf`'s newest (a commit on it)."""
        tpf = self.tokens_per_frame
        for src, dst, n in _runs([(self.physical(i), i) for i in reads]):
            for a, b in zip(self.buffer.k + self.buffer.v, buf.k + buf.v):
                b[:, :, dst * tpf:(dst + n) * tpf] = a[:, :, src * tpf:(src + n) * tpf]
        clock = buf.stamp(reads)
        kept = set(reads)
        stamps = tuple(clock if i in kept else 0 for i in range(self.frames))
        buf.frontier += 1
        return KVCache(buf, self.sink_len, 0, self.ring_len, self.frame_ids, stamps, buf.frontier)

    @staticmethod
    def on(buffer: _KVBuffer) -> "KVCache":
        """An empty view of an existing buffer, its newest: a run reuses its buffer for a new history (every earlier
        view of it goes stale as the new one's frames overwrite their slots)."""
        return KVCache(buffer, serial=buffer.frontier)


@dataclass(frozen=True)
class KVWrite:
    """One model call's write into a view: opened by the forward (which writes every layer's new keys/values and
    attends), then committed into a new view or left as scratch (the base view is unchanged either way)."""

    base: KVCache
    op: tuple  # ("append", n, first_frame) or ("rewrite", n, first_frame, keep_sink)

    def plan_on(self, view: KVCache) -> _Plan:
        kind, *args = self.op
        return view._plan_append(*args) if kind == "append" else view._plan_rewrite(*args)

    @property
    def plan(self) -> _Plan:
        return self.plan_on(self.base)

    @property
    def frames(self) -> int:
        return self.op[1]

    @property
    def tokens_per_frame(self) -> int:
        return self.base.tokens_per_frame

    @property
    def rope(self) -> str:
        return self.base.rope

    def _resolve(self, fork: bool) -> KVCache:
        """The view to write from: the base, or its fork when another branch committed past the base (a fork keeps
        the logical layout, so the operation means the same on it)."""
        base = self.base
        reads = self.plan.reads
        base._require(reads, "a KV write")
        if base.buffer.frontier == base.serial:
            return base
        if not fork:
            hit = base._forks.get(reads)
            return hit if hit is not None else base
        return base._fork(reads)

    def open(self) -> "OpenKVWrite":
        """Start the call: fork on a branch switch, stamp the slots it writes (no earlier view may read them now),
        and return the handle the forward writes and attends through."""
        view = self._resolve(fork=True)
        return OpenKVWrite(view, self.plan_on(view))

    def snapshot(self) -> tuple[list[torch.Tensor], list[torch.Tensor], tuple[int, ...]]:
        """What the last call through this plan saw, logical order: per-layer keys and values [B, heads, tokens,
        head_dim] and the frame ids (written slots as the buffer holds them now: the last call's scratch)."""
        view = self._resolve(fork=False)
        plan = self.plan_on(view)
        result = KVCache(view.buffer, plan.sink_len, plan.ring_start, plan.ring_len, plan.frame_ids)
        slots = result.physical_slots()
        return ([result._gather(t, slots) for t in view.buffer.k], [result._gather(t, slots) for t in view.buffer.v],
                plan.frame_ids)


class OpenKVWrite:
    """A call in progress. The forward writes and attends through `inputs()` (device data of a fixed shape: write
    index, span, mask); `write` / `keys` / `values` do the same on the host's terms (tests, traces: the occupied
    slots in physical order); `commit` returns the view that includes the written frames."""

    def __init__(self, base: KVCache, plan: _Plan):
        buf = base.buffer
        tpf = buf.tokens_per_frame
        self.buffer, self.tokens_per_frame, self.plan = buf, tpf, plan
        result = KVCache(buf, plan.sink_len, plan.ring_start, plan.ring_len, plan.frame_ids)
        phys = [result.physical(i) for i in range(len(plan.frame_ids))]
        n = len(phys)
        key_slots = sorted(phys)  # attended in physical order
        # the occupied slots are a prefix of the buffer (or all of it) whenever views only grow by append / rewrite;
        # after an explicit `evict`, a partial window: `keys` gathers it (a copy), the forward masks the holes
        self._gather = None if key_slots == list(range(n)) else result._token_index(tuple(key_slots))
        self.key_tokens = n * tpf
        written = plan.written
        self.skip = plan.frames - len(written)  # leading frames of the call that only query (a kept sink)
        clock = buf.stamp(tuple(phys[i] for i in written))
        self._stamps = tuple(clock if src is None else base.stamps[src] for src in plan.source)
        # physical token runs written: (start, end, offset of their first token among the written ones)
        self.runs = [(p * tpf, (p + c) * tpf, j * tpf) for p, j, c in _runs([(phys[i], j) for j, i in enumerate(written)])]
        # logical slot index of every attended key slot (slot RoPE), and the call's query frames' slots
        logical_of = {p: i for i, p in enumerate(phys)}
        self.key_positions = tuple(logical_of[p] for p in key_slots)
        self.query_positions = tuple(range(n - plan.frames, n))
        # what attention reads: a span of the buffer's slots from 0, its empty slots masked (kv_cache docstring)
        self.span_frames = attention_span(max(phys) + 1, buf.frames)
        self.masked = key_slots != list(range(self.span_frames))
        self._occupied = [(p * tpf, (p + c) * tpf) for p, _, c in _runs([(p, p) for p in key_slots])]
        # slot RoPE: the logical index each physical slot of the span is rotated by (0 for an empty, masked slot)
        self.slot_positions = tuple(logical_of.get(p, 0) for p in range(self.span_frames))
        self._result = result

    @property
    def rope(self) -> str:
        return self.buffer.rope

    @property
    def span(self) -> int:
        """Tokens attention reads: the first `span` of the buffer."""
        return self.span_frames * self.tokens_per_frame

    def inputs(self) -> KVInputs:
        """This call's write index and mask, written in place into the buffer's static tensors of its shape (device
        copies and fills only: no host data crosses, no new storage after a shape's first call)."""
        written = sum(b - a for a, b, _ in self.runs)
        index, mask, positions = self.buffer.static(written, self.span)
        for a, b, c in self.runs:
            index[c:c + (b - a)].copy_(positions[a:b])
        if self.masked:
            mask.fill_(MASKED)
            for a, b in self._occupied:
                mask[..., a:b].fill_(0.0)
        return KVInputs(index, self.skip * self.tokens_per_frame, self.span, mask if self.masked else None)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one layer's new keys/values [B, heads, call tokens, head_dim] (the written frames' part)."""
        off = self.skip * self.tokens_per_frame
        for a, b, c in self.runs:
            self.buffer.k[layer][:, :, a:b] = k[:, :, off + c:off + c + (b - a)]
            self.buffer.v[layer][:, :, a:b] = v[:, :, off + c:off + c + (b - a)]

    def keys(self, layer: int) -> torch.Tensor:
        """The occupied slots' keys in physical order (in place when they are a prefix of the buffer)."""
        t = self.buffer.k[layer]
        return t[:, :, :self.key_tokens] if self._gather is None else t.index_select(2, self._gather)

    def values(self, layer: int) -> torch.Tensor:
        t = self.buffer.v[layer]
        return t[:, :, :self.key_tokens] if self._gather is None else t.index_select(2, self._gather)

    def commit(self) -> KVCache:
        """The view that includes the frames just written (made only when the whole call finished)."""
        self.buffer.frontier += 1
        r = self._result
        return KVCache(self.buffer, r.sink_len, r.ring_start, r.ring_len, r.frame_ids, self._stamps,
                       self.buffer.frontier)
