"""Host-device traffic of one generation, measured: every copy that crosses devices and every read of a device value
by the host, per block and per call site (issue 19 item 3; docs/benchmarks.md "Host-device traffic per block").

    counter = TrafficCounter()
    with counter:
        ...                      # any torch code; counter.mark_block(i) starts block i's tally
    counter.summary()            # per block and per site: copies, bytes, direction, scalar reads

A `TorchDispatchMode` sees each aten op the Python code issues, so it counts what the code asks for, on any device
pair: `_to_copy` / `copy_` whose source and destination devices differ (bytes of the destination, direction, pinned
or not), and ops whose result the host must wait for (`_local_scalar_dense`: `.item()`, `float(t)`, `bool(t)`;
data-dependent shapes: `nonzero`, `masked_select`, `unique`; `equal`). On CUDA, `measure_generation` also counts what
CUDA itself reports as synchronizing (`torch.cuda.set_sync_debug_mode("warn")`), an independent tally of the syncs.
Each record is attributed to the first frame of this repository's code outside this file (file:function), so the
table names the line of the pack that asked for the copy.

Graph readiness (issue 33 item 3): `TrafficCounter(any_device=True)` also counts reads of values on the host itself
(what would be a device value on a GPU: a CPU run shows them all), and a `TorchFunctionMode` beside the dispatch mode
sees the Python-level reads that issue no aten op (`.tolist()`, `.numpy()`, `.cpu()`). `measure_block_reads` runs a
generation with every model call marked, and counts per block the reads between the block's first and last model
call (a CUDA graph of the block loop could not contain them), the router's score read apart.
"""
from __future__ import annotations

import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
HOST = torch.device("cpu")
_aten = torch.ops.aten
# ops whose result the host has to read back before it can go on (a sync when the operand lives on a device)
SCALAR_READS = {_aten._local_scalar_dense.default, _aten.equal.default, _aten.is_nonzero.default}
SHAPE_READS = {_aten.nonzero.default, _aten.masked_select.default, _aten._unique2.default,
               _aten.unique_dim.default, _aten.unique_consecutive.default}
# Tensor methods that read a value back to Python without an aten op of their own (the function mode sees them)
PYTHON_READS = {"tolist", "numpy", "cpu"}
# where the router scores a draft (the scorer and the engine's score step): its reads are the router's, the one read
# per scored block a graph-ready loop keeps (the scores to the host; the PIL preprocessing path, ImageReward's own,
# resizes on the host, and BLIP's text encoder checks its attention mask)
SCORE_SITES = ("sdvg_core/models/reward", "sdvg_core/engine/engine.py:score")
CUDA_SYNC_WARNING = "synchroniz"  # torch.cuda.set_sync_debug_mode("warn"): "called a synchronizing CUDA operation"


@dataclass(frozen=True)
class Crossing:
    """One copy between devices, or one host read of a device value (`kind` "read")."""

    block: int
    kind: str  # "to host" / "to device" / "device to device" / "read"
    nbytes: int
    site: str  # repository file:function that asked for it
    op: str
    pinned: bool = False  # the host side of a copy is pinned memory (then it need not wait for the queue)
    seq: int = 0  # order of the record among everything the counter saw (model-call marks included)


def direction(src: torch.device, dst: torch.device, host: torch.device = HOST) -> str | None:
    """Which way a copy from `src` to `dst` goes, or None when it stays on one device."""
    if src == dst:
        return None
    if dst == host:
        return "to host"
    if src == host:
        return "to device"
    return "device to device"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def call_site(skip: tuple[str, ...] = (__file__,)) -> str:
    """The innermost frame of this repository's code, outside `skip`: `path/from/repo.py:function`."""
    root = str(REPO)
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(root) and name not in skip and "/.venv/" not in name:
            return f"{Path(name).relative_to(REPO)}:{f.f_code.co_name}"
        f = f.f_back
    return "(outside the repository)"


class _PythonReads(TorchFunctionMode):
    """The counter's companion: Python-level reads (`PYTHON_READS`) that reach no aten op."""

    def __init__(self, counter: "TrafficCounter") -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in PYTHON_READS and args and isinstance(args[0], torch.Tensor) and self.counter.reads_of(args[0]):
            self.counter._add("read", 0, name)
        return func(*args, **(kwargs or {}))


class TrafficCounter(TorchDispatchMode):
    """Counts device crossings and host reads of device values while active; `mark_block(i)` starts block i.
    `any_device`: count reads of values on every device, the host's own included (graph readiness on a CPU)."""

    def __init__(self, host: torch.device = HOST, any_device: bool = False) -> None:
        super().__init__()
        self.host = host
        self.any_device = any_device
        self.block = 0
        self.records: list[Crossing] = []
        self.calls: list[tuple[int, int, int]] = []  # (block, seq at a model call's start, seq at its end)
        self.seq = 0
        self._python = _PythonReads(self)

    def __enter__(self):
        self._python.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._python.__exit__(*exc)

    def mark_block(self, index: int) -> None:
        self.block = index

    def tick(self) -> int:
        self.seq += 1
        return self.seq

    def reads_of(self, t: torch.Tensor) -> bool:
        """Whether a read of `t` counts: a device value, or any value with `any_device` (never a meta tensor's)."""
        return t.device.type != "meta" and (self.any_device or t.device != self.host)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _aten._to_copy.default:
            self._copy(args[0], out, func)
        elif func is _aten.copy_.default and isinstance(args[1], torch.Tensor):
            self._copy(args[1], args[0], func)
        elif func in SCALAR_READS or func in SHAPE_READS:
            operand = args[0]
            if isinstance(operand, torch.Tensor) and (operand.device != self.host or self.reads_of(operand)):
                self._add("read", operand.element_size() if func in SCALAR_READS else 0, func)
        return out

    def _copy(self, src: torch.Tensor, dst: torch.Tensor, func) -> None:
        """A copy from `src` into `dst`, recorded when it crosses devices (bytes written; host side pinned?)."""
        way = direction(src.device, dst.device, self.host)
        if way:
            pinned = way != "device to device" and (dst if dst.device == self.host else src).is_pinned()
            self._add(way, _nbytes(dst), func, pinned)

    def _add(self, kind: str, nbytes: int, func, pinned: bool = False) -> None:
        op = func if isinstance(func, str) else str(func.overloadpacket.__name__)
        self.records.append(Crossing(self.block, kind, nbytes, call_site(), op, pinned, self.tick()))

    def block_reads(self, blocks: int) -> list[dict]:
        """Per block: the reads between its first model call's start and its last model call's end, by site and
        op, the router's (`SCORE_SITES`) counted apart; also the reads outside that window."""
        out = []
        for b in range(blocks):
            marks = [(s, e) for blk, s, e in self.calls if blk == b]
            lo, hi = (min(s for s, _ in marks), max(e for _, e in marks)) if marks else (0, -1)
            inside, score, outside = Counter(), 0, 0
            for r in self.records:
                if r.block != b or r.kind != "read":
                    continue
                if not lo <= r.seq <= hi:
                    outside += 1
                elif r.site.startswith(SCORE_SITES):
                    score += 1
                else:
                    inside[f"{r.site} {r.op}"] += 1
            out.append({"model_calls": len(marks), "reads": sum(inside.values()), "score_reads": score,
                        "reads_outside_calls": outside, "sites": dict(inside)})
        return out

    def summary(self, blocks: int | None = None) -> dict:
        """Per block: copies and bytes each way and host reads; per site: the same over the whole run."""
        n = blocks if blocks is not None else (max((r.block for r in self.records), default=-1) + 1)
        per_block = [{"copies": Counter(), "bytes": Counter(), "reads": 0} for _ in range(n)]
        sites: dict[tuple[str, str], dict] = defaultdict(lambda: {"count": 0, "bytes": 0, "pinned": 0})
        for r in self.records:
            b = per_block[r.block] if r.block < n else None
            if r.kind == "read":
                if b is not None:
                    b["reads"] += 1
            elif b is not None:
                b["copies"][r.kind] += 1
                b["bytes"][r.kind] += r.nbytes
            s = sites[(r.site, r.kind)]
            s["count"] += 1
            s["bytes"] += r.nbytes
            s["pinned"] += r.pinned
        return {"per_block": [{"copies": dict(b["copies"]), "bytes": dict(b["bytes"]), "reads": b["reads"]}
                              for b in per_block],
                "sites": [{"site": site, "kind": kind, **v} for (site, kind), v in
                          sorted(sites.items(), key=lambda kv: -kv[1]["bytes"])]}


def measure_generation(engine, spec, policy, *, cuda_sync_warnings: bool | None = None) -> tuple[dict, object]:
    """Runs `engine.generate(spec, policy)` under a TrafficCounter, one tally per block; on CUDA also counts the
    syncs CUDA reports. Returns (the summary with each block's decision, the final state)."""
    from sdvg_core.engine.engine import Callbacks

    counter = TrafficCounter()
    previous = engine.callbacks

    def on_progress(ev) -> None:
        if ev.kind == "block":
            counter.mark_block(ev.block + 1)

    engine.callbacks = Callbacks(progress=on_progress)
    watch = torch.cuda.is_available() if cuda_sync_warnings is None else cuda_sync_warnings
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if watch:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                with counter:
                    state = engine.generate(spec, policy)
            finally:
                if watch:
                    torch.cuda.set_sync_debug_mode("default")
    finally:
        engine.callbacks = previous
    summary = counter.summary(spec.num_blocks)
    syncs = [w for w in caught if CUDA_SYNC_WARNING in str(w.message)]
    summary["cuda_reported_syncs"] = len(syncs) if watch else None
    summary["cuda_reported_sync_sites"] = dict(Counter(
        f"{Path(w.filename).name}:{w.lineno}" for w in syncs).most_common(20)) if watch else None
    for b, rec in zip(summary["per_block"], state.blocks):
        b["decision"] = rec.decision
    return summary, state


def measure_block_reads(engine, spec, policy) -> tuple[list[dict], object]:
    """Runs `engine.generate(spec, policy)` under a TrafficCounter(any_device=True) with every model call of both
    roles marked: per block, the host reads between its first and its last model call (`TrafficCounter.
    block_reads`), each block's decision added. Returns (that list, the final state)."""
    from sdvg_core.engine.engine import Callbacks

    counter = TrafficCounter(any_device=True)
    previous = engine.callbacks
    dits = list({id(r): r for r in (engine.drafter, engine.target) if r is not None}.values())
    originals = {id(r): r.forward for r in dits}

    def marked(dit):
        forward = originals[id(dit)]

        def call(*a, **kw):
            start = counter.tick()
            try:
                return forward(*a, **kw)
            finally:
                counter.calls.append((counter.block, start, counter.tick()))
        return call

    def on_progress(ev) -> None:
        if ev.kind == "block":
            counter.mark_block(ev.block + 1)

    engine.callbacks = Callbacks(progress=on_progress)
    for r in dits:
        r.forward = marked(r)
    try:
        with counter:
            state = engine.generate(spec, policy)
    finally:
        engine.callbacks = previous
        for r in dits:
            del r.forward  # the instance attribute goes: the class's forward again
    blocks = counter.block_reads(spec.num_blocks)
    for b, rec in zip(blocks, state.blocks):
        b["decision"] = rec.decision
    return blocks, state


def markdown(doc: dict, where: str) -> str:
    """The measured table: per block kind (forced / accepted / rejected) and per call site."""
    lines = [f"# Host-device traffic per block, measured ({where})", "",
             f"One generation, {len(doc['per_block'])} blocks, scorer preprocessing `{doc.get('preprocessing', '?')}`"
             f"; counted by a TorchDispatchMode (bench/traffic.py): copies between devices and host reads of device "
             f"values.", "",
             "| block | decision | copies to device | MB to device | copies to host | MB to host | host reads |",
             "|---|---|---|---|---|---|---|"]
    for i, b in enumerate(doc["per_block"]):
        lines.append(f"| {i} | {b.get('decision', '')} | {b['copies'].get('to device', 0)} | "
                     f"{b['bytes'].get('to device', 0) / 1e6:.2f} | {b['copies'].get('to host', 0)} | "
                     f"{b['bytes'].get('to host', 0) / 1e6:.2f} | {b['reads']} |")
    if doc.get("cuda_reported_syncs") is not None:
        lines += ["", f"Syncs CUDA reported (set_sync_debug_mode warn): {doc['cuda_reported_syncs']} in the run."]
    lines += ["", "| site | kind | count | MB | pinned |", "|---|---|---|---|---|"]
    lines += [f"| `{s['site']}` | {s['kind']} | {s['count']} | {s['bytes'] / 1e6:.2f} | {s['pinned']} |"
              for s in doc["sites"]]
    return "\n".join(lines) + "\n"
