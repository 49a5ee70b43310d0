"""A long video-to-video run on the tiny models: seconds per block and resident memory stay flat (issue 26).

    .venv/bin/python bench/bench_v2v.py [--blocks 120] [--memo-gb 0] [--json PATH]

Writes an input video of exactly the frames the run needs (9 for block 0, then 12 per block, 96x64, MPEG-4 with
PyAV) to a temporary folder, then runs SDVG (threshold policy at the tiny demo's tau, Krea recipe, strength 0.7) on
the CPU with 1 thread, reading that file as the run goes, writing each block's frames to an MP4 as it commits.
Per block: wall seconds, this process's CPU seconds (less disturbed than wall time on a shared machine) and RSS
(/proc/self/status VmRSS). Prints the first and last 20-block mean seconds and the
RSS at blocks 20, 60, 120 (or the run's last), and the whole table as JSON with --json. `--memo-gb` is the engine's
memo budget for re-runs (default 0, as the demo CLI: what the run needs is held apart from it; a budget fills with
reusable entries up to its size, so RSS then rises until the budget is full).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sdvg_core import (Engine, EngineConfig, GenerationSpec, KreaRecipe, PixelInput, PromptConditioning,  # noqa: E402
                       TieredMemo, VideoWriter, policy_by_name, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT  # noqa: E402
from sdvg_core.demo.cli_args import TINY_DEMO_TAU, TINY_SIZE  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402

STRENGTH = 0.7
WINDOW = 20  # blocks averaged at each end
FPS = 16


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_input(path: Path, frames: int, w: int, h: int) -> Path:
    import av

    rng = np.random.default_rng(0)
    base = rng.random((h, w, 3))
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=FPS)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(frames):  # a slowly drifting picture
            img = ((base + 0.002 * i) % 1.0 * 255).astype(np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=120)
    ap.add_argument("--memo-gb", type=float, default=0.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    w, h = TINY_SIZE
    m = tiny_models(seed=0)
    engine = Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(recipe=KreaRecipe()),
                    memo=TieredMemo.split(int(a.memo_gb * 2**30)))
    with tempfile.TemporaryDirectory(prefix="sdvg-v2v-bench-") as tmp:
        need = 9 + 12 * (a.blocks - 1)
        video = write_input(Path(tmp) / "input.mp4", need, w, h)
        spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, m.target.cfg.text_dim)),
                              w, h, a.blocks, 42, pixels=PixelInput.video_to_video(video, STRENGTH))
        writer = VideoWriter(Path(tmp) / "out.mp4")
        rows: list[dict] = []
        t = [time.perf_counter(), time.process_time()]

        def on_block(eng, st):
            for piece in eng.output_frames(st, st.next_block - 1):
                writer.write(piece)
            now, cpu = time.perf_counter(), time.process_time()
            rows.append({"block": st.next_block - 1, "seconds": now - t[0], "cpu_seconds": cpu - t[1],
                         "rss_mb": rss_mb(), "producer": st.blocks[-1].producer})
            t[:] = [now, cpu]

        state = engine.generate(spec, policy_by_name("sdvg", tau=TINY_DEMO_TAU), on_block=on_block)
        writer.close()
    secs, cpu = [r["seconds"] for r in rows], [r["cpu_seconds"] for r in rows]
    n = len(rows)
    first, last = statistics.mean(secs[:WINDOW]), statistics.mean(secs[-WINDOW:])
    at = {k: rows[min(k, n) - 1]["rss_mb"] for k in (20, 60, 120) if n}
    summary = {"blocks": n, "memo_gb": a.memo_gb, "stopped": state.stopped, "input_frames": state.given_frames,
               "accepted": sum(r.decision == "accepted" for r in state.blocks),
               f"first_{WINDOW}_mean_s": round(first, 4), f"last_{WINDOW}_mean_s": round(last, 4),
               f"first_{WINDOW}_mean_cpu_s": round(statistics.mean(cpu[:WINDOW]), 4),
               f"last_{WINDOW}_mean_cpu_s": round(statistics.mean(cpu[-WINDOW:]), 4),
               "rss_mb_at_block": {str(k): round(v, 1) for k, v in at.items()}}
    print(json.dumps(summary, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "per_block": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
