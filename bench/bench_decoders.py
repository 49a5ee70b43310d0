"""Benchmark (not a test): one block's decode, full Wan 2.1 VAE vs TAEHV (taew2_1 widths), both with random weights.

The steady state a run sees: a block of 3 latent frames decoded after a first block, from the decoder cache / memory
the first block left (decoded once per size and decoder, not timed). Rounds are interleaved (VAE, TAEHV, TAEHV, VAE,
...) so a change in the machine's load hits both decoders alike.

Memory: each measured decode runs in a forked child (the models and the first block's cache are shared with the
parent). The child records its resident set size (/proc statm), resets its high-water mark (/proc/self/clear_refs
5), decodes, and reads the high-water mark back (VmHWM): the peak delta is what the decode itself made resident
(activations, the pixels and the new cache; the old cache and the weights are already resident and not counted).
Each child first decodes two tiny chunks, so the kernels' code pages of the shared libraries (mapped lazily
after a fork) are resident before the measurement. Large buffers are returned to the system when freed (MALLOC_MMAP_THRESHOLD_ is set before the process starts, so
glibc mmaps every buffer >= 64 KiB instead of keeping it in its heap), so the RSS follows the tensors that are
alive; tracemalloc cannot see torch's allocations. The cache / memory size is computed (`nbytes`), not measured.

Usage: python bench/bench_decoders.py [--sizes 416x240,832x480] [--rounds 2] [--vae-rounds 832x480=1]
                                      [--dtype fp32] [--json PATH]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benchmarks

from sdvg_core.demo.tiny import random_vae  # noqa: E402
from sdvg_core.demo.tiny_taehv import random_taehv  # noqa: E402
from sdvg_core.models.dtypes import DTYPES  # noqa: E402
from bench_scale import run_forked  # noqa: E402 (a forked child per measurement, as the scale benchmark runs)

REPO = Path(__file__).resolve().parents[1]
BLOCK_FRAMES = 3  # latent frames per block (Self-Forcing / Krea)
LATENT_CHANNELS = 16
SPATIAL = 8  # pixels per latent, both decoders
MMAP_THRESHOLD = 65536  # bytes: every larger buffer is its own mmap, unmapped when freed
PAGE = os.sysconf("SC_PAGE_SIZE")
DECODERS = ("wan_vae", "taehv")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def reset_hwm() -> bool:
    """Start a new RSS high-water mark at the current RSS (False where the kernel does not allow it)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


WARMUP_LATENT = (1, LATENT_CHANNELS, 1, 4, 4)  # [B, C, T, h, w]: two of these run first in each measuring child


def warm_up(decoder, dtype: torch.dtype) -> None:
    """Run the decoder's code paths (first and later chunks) at a tiny size: a forked child maps the shared
    libraries' kernel code lazily, and those pages would otherwise count as the measured decode's memory."""
    z = torch.zeros(WARMUP_LATENT, dtype=dtype)
    _, cache = decoder.decode_stream(z, None)
    decoder.decode_stream(z, cache)


def measure(decoder, z: torch.Tensor, cache) -> dict:
    """In the child: one steady-state block decode, its seconds and RSS peak delta."""
    warm_up(decoder, z.dtype)
    malloc_trim()
    rss0 = rss_bytes()
    reset_ok = reset_hwm()
    t0 = time.perf_counter()
    pixels, new_cache = decoder.decode_stream(z, cache)
    seconds = time.perf_counter() - t0
    peak = hwm_bytes()
    return {"seconds": seconds, "peak_delta_bytes": peak - rss0 if reset_ok else None,
            "pixels_shape": list(pixels.shape), "new_cache_bytes": new_cache.nbytes}


def floor() -> dict:
    """In the child: the peak delta of a measurement that allocates nothing (the method's floor)."""
    malloc_trim()
    rss0 = rss_bytes()
    reset_hwm()
    return {"peak_delta_bytes": hwm_bytes() - rss0}


def parse_size(text: str) -> tuple[int, int]:
    w, h = (int(v) for v in text.lower().split("x"))
    if w % SPATIAL or h % SPATIAL:
        raise SystemExit(f"size {text}: width and height must be multiples of {SPATIAL}")
    return w, h


def bench_size(size: str, rounds: dict[str, int], dtype: torch.dtype, models: dict, seed: int) -> dict:
    w, h = parse_size(size)
    gen = torch.Generator().manual_seed(seed)
    first = torch.randn(1, LATENT_CHANNELS, BLOCK_FRAMES, h // SPATIAL, w // SPATIAL, generator=gen).to(dtype)
    block = torch.randn(1, LATENT_CHANNELS, BLOCK_FRAMES, h // SPATIAL, w // SPATIAL, generator=gen).to(dtype)
    caches, first_s = {}, {}
    for name in DECODERS:  # the first block, in the parent: its cache is shared with every measuring child
        t0 = time.perf_counter()
        _, caches[name] = models[name].decode_stream(first, None)
        first_s[name] = time.perf_counter() - t0
        print(f"  {size} {name}: first block {first_s[name]:.1f} s (not a measurement: sets up the cache)", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in DECODERS}
    for r in range(max(rounds.values())):
        order = DECODERS if r % 2 == 0 else tuple(reversed(DECODERS))
        for name in order:
            if r >= rounds[name]:
                continue
            result = run_forked(lambda: measure(models[name], block, caches[name]))
            runs[name].append(result)
            peak = "?" if result["peak_delta_bytes"] is None else f"{result['peak_delta_bytes'] / 2**20:.0f} MiB"
            print(f"  {size} {name} round {r}: {result['seconds']:.2f} s, peak +{peak}", flush=True)
    out = {"size": size, "latent": [BLOCK_FRAMES, h // SPATIAL, w // SPATIAL], "decoders": {}}
    for name in DECODERS:
        rows = runs[name]
        secs = [x["seconds"] for x in rows]
        peaks = [x["peak_delta_bytes"] for x in rows if x["peak_delta_bytes"] is not None]
        out["decoders"][name] = {
            "rounds": len(rows), "seconds": secs, "median_s": statistics.median(secs) if secs else None,
            "peak_delta_bytes": peaks, "max_peak_delta_bytes": max(peaks) if peaks else None,
            "cache_bytes": caches[name].nbytes, "pixels_shape": rows[0]["pixels_shape"] if rows else None,
            "first_block_s": first_s[name]}
    vae, tiny = out["decoders"]["wan_vae"], out["decoders"]["taehv"]
    if vae["median_s"] and tiny["median_s"]:
        out["speedup"] = vae["median_s"] / tiny["median_s"]
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(results: list[dict]) -> str:
    lines = ["| size | decoder | rounds | median s / block | s per round | peak RSS delta (MiB) | cache / memory (MiB, computed) |",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        for name in DECODERS:
            d = res["decoders"][name]
            median = "-" if d["median_s"] is None else f"{d['median_s']:.2f}"
            peak = "-" if d["max_peak_delta_bytes"] is None else f"{d['max_peak_delta_bytes'] / 2**20:.0f}"
            each = ", ".join(f"{s:.2f}" for s in d["seconds"])
            lines.append(f"| {res['size']} | {name} | {d['rounds']} | {median} | {each} | {peak} | "
                         f"{d['cache_bytes'] / 2**20:.1f} |")
        if "speedup" in res:
            lines.append(f"| {res['size']} | VAE / TAEHV time | | {res['speedup']:.1f}x | | | |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="416x240,832x480", help="WxH list (pixels)")
    p.add_argument("--rounds", type=int, default=2, help="measured blocks per decoder and size")
    p.add_argument("--vae-rounds", action="append", default=[], metavar="WxH=N",
                   help="fewer full-VAE rounds at a size (its 832x480 CPU decode takes minutes)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != str(MMAP_THRESHOLD):  # glibc reads it at start: run again with it
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    torch.set_num_threads(1)  # a forked child cannot use the parent's OpenMP pool; 1 thread for both decoders
    dtype = DTYPES[args.dtype]
    vae_rounds = dict(item.split("=") for item in args.vae_rounds)
    models = {"wan_vae": random_vae(args.seed, "wan2.1-vae", dtype), "taehv": random_taehv("taew2_1", args.seed, dtype)}
    meta = {"command": " ".join(["python", *sys.argv]), "commit": git_commit(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "dtype": args.dtype, "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "memory_method": "forked child: VmHWM after clear_refs 5, minus RSS before",
            "params": {k: sum(t.numel() for t in m.parameters()) for k, m in models.items()}}
    meta["floor_bytes"] = run_forked(floor)["peak_delta_bytes"]  # what an empty measurement reads
    print(f"commit {meta['commit']}, torch {meta['torch']}, {meta['threads']} thread, {args.dtype}; an empty "
          f"measurement reads +{meta['floor_bytes'] / 2**20:.1f} MiB", flush=True)
    results = []
    for size in args.sizes.split(","):
        rounds = {"wan_vae": int(vae_rounds.get(size, args.rounds)), "taehv": args.rounds}
        results.append(bench_size(size, rounds, dtype, models, args.seed))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
