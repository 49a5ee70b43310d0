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
"""
from __future__ import annotations

import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
HOST = torch.device("cpu")
_aten = torch.ops.aten
# ops whose result the host has to read back before it can go on (a sync when the operand lives on a device)
SCALAR_READS = {_aten._local_scalar_dense.default, _aten.equal.default, _aten.is_nonzero.default}
SHAPE_READS = {_aten.nonzero.default, _aten.masked_select.default, _aten._unique2.default,
               _aten.unique_dim.default, _aten.unique_consecutive.default}
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


class TrafficCounter(TorchDispatchMode):
    """Counts device crossings and host reads of device values while active; `mark_block(i)` starts block i."""

    def __init__(self, host: torch.device = HOST) -> None:
        super().__init__()
        self.host = host
        self.block = 0
        self.records: list[Crossing] = []

    def mark_block(self, index: int) -> None:
        self.block = index

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is _aten._to_copy.default:
            self._copy(args[0], out, func)
        elif func is _aten.copy_.default and isinstance(args[1], torch.Tensor):
            self._copy(args[1], args[0], func)
        elif func in SCALAR_READS or func in SHAPE_READS:
            operand = args[0]
            if isinstance(operand, torch.Tensor) and operand.device != self.host:
                self._add("read", operand.element_size() if func in SCALAR_READS else 0, func)
        return out

    def _copy(self, src: torch.Tensor, dst: torch.Tensor, func) -> None:
        """A copy from `src` into `dst`, recorded when it crosses devices (bytes written; host side pinned?)."""
        way = direction(src.device, dst.device, self.host)
        if way:
            pinned = way != "device to device" and (dst if dst.device == self.host else src).is_pinned()
            self._add(way, _nbytes(dst), func, pinned)

    def _add(self, kind: str, nbytes: int, func, pinned: bool = False) -> None:
        self.records.append(Crossing(self.block, kind, nbytes, call_site(), str(func.overloadpacket.__name__),
                                     pinned))

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
