"""Process RSS against what the memo holds over a long tiny run (the benchmark's models and 6-of-8 pattern).

Separates the memo's own bytes (its accounting, and the unique tensor storages its entries reach) from memory the
C allocator keeps after the LRU frees small tensors (what `malloc_trim(0)` gives back on glibc). README, Speed,
"Long videos (measured)".

    .venv/bin/python scripts/memo_rss_probe.py [--blocks 120] [--every 25] [--memo-gb 2]
    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python scripts/memo_rss_probe.py     # tensors on their own pages
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
import bench_scale as bs  # noqa: E402
from sdvg_core.engine.engine import Callbacks, Engine  # noqa: E402

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
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    args = bs.parse_args(["--size", "tiny", "--blocks", str(a.blocks), "--drafter-recipe", "longlive",
                          "--target-recipe", "krea", "--memo-gb", str(a.memo_gb)])
    with tempfile.TemporaryDirectory() as tmp:
        s, _ = bs.make_setup(args, Path(tmp))
    cfg = bs.select_configs("sdvg")[0]
    engine = Engine(s.models.target, s.models.vae, s.models.drafter, s.models.scorer, bs.engine_config(s, True))

    def line(what: str) -> None:
        print(f"{what}: RSS {bs.rss_bytes() / MIB:.0f} MiB | memo accounted {engine.memo.bytes / MIB:.0f} MiB, "
              f"unique tensor storage {memo_storage_bytes(engine.memo) / MIB:.0f} MiB, {len(engine.memo)} entries",
              flush=True)

    engine.callbacks = Callbacks(progress=lambda ev: ev.kind == "block" and ev.block % a.every == 0
                                 and line(f"block {ev.block}"))
    engine.generate(replace(s.spec, num_blocks=a.blocks), cfg.policy(a.blocks))
    line("end")
    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)
        line("after malloc_trim(0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
