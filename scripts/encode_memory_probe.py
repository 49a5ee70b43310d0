#!/usr/bin/env python3
"""Peak memory (RSS) of one process encoding a video with the Wan VAE: prints one JSON line.

    .venv/bin/python scripts/encode_memory_probe.py FRAMES HEIGHT WIDTH MODE [PRESET]

MODE "stream": the frames are made piece by piece (4 frames, seeded) only when the encoder asks for them, as a file
reader hands them over, and fed to `WanVAE.encode_chunks`; "whole": the same frames as one tensor through `encode`
(what streaming avoids). PRESET: "tiny" (the fixtures' width, default) or "wan2.1-vae" (the real width, random
weights). Peak RSS is VmHWM from /proc/self/status (Linux): run it for N and 4N frames (docs/pixels.md).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.demo.tiny import random_vae  # noqa: E402

PIECE = 4  # frames per piece: one encoder chunk


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def pieces(frames: int, height: int, width: int):
    gen = torch.Generator().manual_seed(0)
    for s in range(0, frames, PIECE):
        yield torch.rand(1, 3, min(PIECE, frames - s), height, width, generator=gen) * 2 - 1  # [1, 3, t, H, W]


def main() -> None:
    frames, height, width, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    preset = sys.argv[5] if len(sys.argv) > 5 else "tiny"
    torch.set_num_threads(1)
    vae = random_vae(0, preset)
    start = time.perf_counter()
    with torch.no_grad():
        if mode == "stream":
            latent_frames = sum(z.shape[2] for z in vae.encode_chunks(pieces(frames, height, width)))
        elif mode == "whole":
            latent_frames = vae.encode(torch.cat(list(pieces(frames, height, width)), dim=2)).shape[2]
        else:
            raise SystemExit(f"unknown mode {mode!r}: stream or whole")
    print(json.dumps({"frames": frames, "height": height, "width": width, "mode": mode, "preset": preset,
                      "latent_frames": latent_frames, "seconds": round(time.perf_counter() - start, 2),
                      "peak_rss_bytes": peak_rss_bytes()}))


if __name__ == "__main__":
    main()
