"""RSS follows what a long run keeps (sdvg_core/engine/heap.py): freed small tensors' pages go back to the OS, and
the command lines (demo, sdvg_eval's workers) trim the heap every few blocks. glibc (Linux) only."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdvg_core.engine import heap

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
pytestmark = [
    pytest.mark.slow,  # whole runs to watch the heap trimmed
    pytest.mark.skipif(heap._libc() is None, reason="no glibc malloc_trim here: nothing to trim")]

# A clean process fills its heap with 48 KiB tensors (below glibc's 128 KiB mmap threshold, so from the heap, as the
# memo's small entries are), frees 7 of every 8 (the LRU evicting around entries it keeps) and trims.
FRAGMENT = """
import gc, os, sys
import torch
sys.path.insert(0, {repo!r})
from sdvg_core.engine.heap import trim_heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

keep, drop = [], []
for i in range(6000):
    t = torch.ones(12 * 1024)  # 48 KiB, written: resident
    (keep if i % 8 == 0 else drop).append(t)
drop.clear()
gc.collect()
before = rss()
trim_heap()
print(before, rss())
"""


def test_trimming_returns_the_pages_of_freed_small_tensors():
    out = subprocess.run([sys.executable, "-c", FRAGMENT.format(repo=str(REPO))], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = (int(v) for v in out.stdout.split())
    freed = 6000 * 7 // 8 * 48 * 1024  # 246 MiB freed; glibc keeps it resident until trimmed
    assert before - after > freed // 2, (before / MIB, after / MIB)


def test_the_demo_trims_the_heap_every_few_blocks(tmp_path, monkeypatch):
    from sdvg_core.demo.cli import main

    calls = []
    monkeypatch.setattr(heap, "trim_heap", lambda: calls.append(1) or True)
    blocks = 2 * heap.TRIM_EVERY_BLOCKS
    assert main(["--blocks", str(blocks), "--width", "16", "--height", "16", "--quiet", "--out", str(tmp_path)]) == 0
    assert len(calls) == blocks // heap.TRIM_EVERY_BLOCKS


def test_the_eval_worker_trims_the_heap_every_few_blocks(tmp_path, monkeypatch):
    from sdvg_eval.eval import main

    calls = []
    monkeypatch.setattr(heap, "trim_heap", lambda: calls.append(1) or True)
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", "heap-test")
    (tmp_path / "p.txt").write_text("a lighthouse in a storm\n")
    blocks = 2 * heap.TRIM_EVERY_BLOCKS
    assert main(["--tiny", "--prompts", str(tmp_path / "p.txt"), "--configs", "target-only", "--metrics", "imagereward",
                 "--blocks", str(blocks), "--width", "16", "--height", "16", "--workers", "0", "--no-report",
                 "--out", str(tmp_path / "o")]) == 0
    assert len(calls) == blocks // heap.TRIM_EVERY_BLOCKS
