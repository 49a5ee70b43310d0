"""Process RSS against what the memo holds over a long tiny run (the benchmark's models and 6-of-8 pattern).

Separates the memo's own bytes (its accounting, and the unique tensor storages its entries reach) from memory the
C allocator keeps after the LRU frees small tensors (what `malloc_trim(0)` gives back on glibc). docs/long-video.md,
"Long videos (measured)".

    .venv/bin/python scripts/memo_rss_probe.py [--blocks 120] [--every 25] [--memo-gb 2] [--trim-every N]
    .venv/bin/python scripts/memo_rss_probe.py --trim-every 0     # glibc's default: no trim during the run
    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python scripts/memo_rss_probe.py --trim-every 0  # tensors on own pages

`--trim-every N` trims the heap every N blocks as the command lines do (sdvg_core/engine/heap.py; default: their
TRIM_EVERY_BLOCKS); 0 runs with glibc's default behaviour. Each line gives the seconds per block since the last.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
import bench_scale as bs  # noqa: E402
from sdvg_core.engine.engine import Callbacks, Engine  # noqa: E402
from sdvg_core.engine.heap import TRIM_EVERY_BLOCKS, HeapTrimmer  # noqa: E402

MIB = 1 << 20


def unique_storage_bytes(value, seen: set[int]) -> int:
    """Bytes of the tensor storages a value reaches that `seen` does not hold yet (attributes, slots, containers)."""
    if isinstance(value, torch.Tensor):
        ptr = value.untyped_storage().data_ptr()
        if ptr in seen:
            return 0
        seen.add(ptr)
        return value.untyped_storage().nbytes()
    if isinstance(value, (tuple, list)):
        return sum(unique_storage_bytes(v, seen) for v in value)
    if isinstance(value, dict):
        return sum(unique_storage_bytes(v, seen) for v in value.values())
    attrs = dict(vars(value)) if hasattr(value, "__dict__") else {}
    attrs.update({s: getattr(value, s) for s in getattr(type(value), "__slots__", ()) if hasattr(value, s)})
    return sum(unique_storage_bytes(v, seen) for v in attrs.values())


def memo_storage_bytes(memo) -> int:
    seen: set[int] = set()
    tiers = (memo.small, memo.large) if hasattr(memo, "small") else (memo,)
    return sum(unique_storage_bytes(v, seen) for t in tiers for v, _ in t._data.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=120)
    ap.add_argument("--every", type=int, default=25, help="print a line every N blocks")
    ap.add_argument("--memo-gb", type=float, default=2.0)
    ap.add_argument("--trim-every", type=int, default=TRIM_EVERY_BLOCKS,
                    help=f"trim the heap every N blocks (default {TRIM_EVERY_BLOCKS}, as the command lines; 0: never)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    args = bs.parse_args(["--size", "tiny", "--blocks", str(a.blocks), "--drafter-recipe", "longlive",
                          "--target-recipe", "krea", "--memo-gb", str(a.memo_gb)])
    with tempfile.TemporaryDirectory() as tmp:
        s, _ = bs.make_setup(args, Path(tmp))
    cfg = bs.select_configs("sdvg")[0]
    engine = Engine(s.models.target, s.models.vae, s.models.drafter, s.models.scorer, bs.engine_config(s, True))

    trimmer = HeapTrimmer(a.trim_every)
    last = {"t": time.perf_counter(), "cpu": time.process_time(), "block": 0}

    def line(what: str, block: int | None = None) -> None:
        now, cpu, per = time.perf_counter(), time.process_time(), ""
        if block is not None and block > last["block"]:
            k = block - last["block"]
            per = f" | {(now - last['t']) / k:.3f} s/block wall, {(cpu - last['cpu']) / k:.3f} CPU"
            last.update(t=now, cpu=cpu, block=block)
        print(f"{what}: RSS {bs.rss_bytes() / MIB:.0f} MiB | memo accounted {engine.memo.bytes / MIB:.0f} MiB, "
              f"unique tensor storage {memo_storage_bytes(engine.memo) / MIB:.0f} MiB, {len(engine.memo)} entries"
              + per, flush=True)

    engine.callbacks = Callbacks(progress=lambda ev: ev.kind == "block" and ev.block % a.every == 0
                                 and line(f"block {ev.block}", ev.block))
    t0, c0 = time.perf_counter(), time.process_time()
    engine.generate(replace(s.spec, num_blocks=a.blocks), cfg.policy(a.blocks),
                    on_block=lambda eng, st: trimmer.block_done())
    print(f"{a.blocks} blocks in {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU, "
          f"{trimmer.trims} trims taking {trimmer.seconds:.2f} s", flush=True)
    line("end")
    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)
        line("after malloc_trim(0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
