"""Benchmark (not a test): ImageReward-v1.0-size scorer, 12 frames at 832x480, batched vs one frame at a time.

Random weights built in code (no download). Reports total and per-frame seconds and the preprocessing share.
Usage: .venv/bin/python bench/bench_reward.py [--frames 12] [--height 480] [--width 832] [--device cpu]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.models.reward import IMAGEREWARD_V1, ImageRewardScorer, build_model  # noqa: E402
from sdvg_core.demo.vocab import write_synthetic_vocab  # noqa: E402
from sdvg_core.io.reward_files import count_vocab_lines, load_tokenizer  # noqa: E402

# Counted cost of one image through ImageReward-v1.0 (ViT-L/16 at 224 + 35-token BERT cross-encoder).
GFLOP_PER_IMAGE = 138.0
REPO = Path(__file__).resolve().parents[1]
SHARED_VOCAB = Path(os.environ.get("SDVG_SHARED_DIR", REPO.parent / "shared")) / "data" / "bert-base-uncased-vocab.txt"
PROMPT = "A golden retriever puppy runs through a sunlit meadow of tall grass, chasing a red ball, slow motion."
from sdvg_core.models.dtypes import DTYPES  # noqa: E402


@dataclass
class Row:
    """One benchmark line."""

    mode: str
    total_s: float
    preprocess_s: float
    frames: int
    rewards: torch.Tensor


def video_like_frames(n: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """ComfyUI IMAGE [n, H, W, 3] float 0..1: smooth moving gradients and blobs plus mild noise (decoded-video-like)."""
    g = torch.Generator().manual_seed(seed)
    yy = torch.linspace(0, 1, height).view(1, height, 1)
    xx = torch.linspace(0, 1, width).view(1, 1, width)
    t = torch.arange(n, dtype=torch.float32).view(n, 1, 1) / max(n, 1)
    r = 0.5 + 0.4 * torch.sin(6.0 * xx + 3.0 * t)  # [n, 1, W]
    gch = 0.3 + 0.5 * yy * (1 - xx) + 0.1 * torch.cos(9.0 * yy - 2.0 * t)  # [n, H, W]
    b = 0.6 * torch.exp(-((xx - 0.3 - 0.4 * t) ** 2 + (yy - 0.5) ** 2) / 0.02)  # [n, H, W]
    img = torch.stack(torch.broadcast_tensors(r, gch, b), dim=-1)  # [n, H, W, 3]
    return (img + 0.02 * torch.randn(img.shape, generator=g)).clamp(0, 1)


def make_scorer(device: str, dtype: torch.dtype, vocab: Path | None) -> tuple[ImageRewardScorer, str]:
    """Real-size random model; the real bert vocab when available, else a synthetic one (same compute)."""
    if vocab is None and SHARED_VOCAB.is_file():
        vocab = SHARED_VOCAB
    if vocab is None:
        vocab = write_synthetic_vocab(Path(tempfile.mkdtemp(prefix="sdvg_bench_")) / "vocab.txt")
        cfg, note = IMAGEREWARD_V1.with_vocab(count_vocab_lines(vocab.read_bytes()) + 2), "synthetic vocab"
    else:
        cfg, note = IMAGEREWARD_V1, f"vocab {vocab}"
    model = build_model(cfg, seed=0, device=device, dtype=dtype)
    return ImageRewardScorer(model, load_tokenizer(vocab, cfg)), note


def sync(device: str) -> None:
    """Wait for queued device work so wall-clock times are honest."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(scorer: ImageRewardScorer, frames: torch.Tensor, batched: bool, device: str) -> Row:
    """Score all frames in one call (batched) or one call per frame, timing preprocessing separately."""
    groups = [frames] if batched else [frames[i:i + 1] for i in range(frames.shape[0])]
    scorer.micro_batch = frames.shape[0] if batched else 1
    pre, out = 0.0, []
    sync(device)
    start = time.perf_counter()
    for group in groups:
        t0 = time.perf_counter()
        pixels = scorer.preprocess(group)  # [B, 3, 224, 224] uint8, the PIL path
        pre += time.perf_counter() - t0
        out.append(scorer.score_pixels(pixels, PROMPT))
    sync(device)
    total = time.perf_counter() - start
    return Row("batched" if batched else "one at a time", total, pre, frames.shape[0], torch.cat(out))


def main() -> None:
    """Build, warm up, measure both modes, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--vocab", type=Path, default=None)
    args = ap.parse_args()

    t0 = time.perf_counter()
    scorer, note = make_scorer(args.device, DTYPES[args.dtype], args.vocab)
    n_params = sum(p.numel() for p in scorer.model.parameters())
    print(f"ImageReward-v1.0 architecture, random weights: {n_params / 1e6:.1f} M params, built in "
          f"{time.perf_counter() - t0:.1f} s ({note}); device {args.device}, {args.dtype}, "
          f"{torch.get_num_threads()} CPU threads, torch {torch.__version__}")
    frames = video_like_frames(args.frames, args.height, args.width)
    run(scorer, frames[:1], batched=True, device=args.device)  # warm-up (allocations, lazy imports)
    rows = [run(scorer, frames, batched=True, device=args.device),
            run(scorer, frames, batched=False, device=args.device)]
    ref = rows[0].rewards
    print(f"\n{args.frames} frames {args.width}x{args.height} -> 224x224 crops, prompt of "
          f"{int(scorer.text_inputs(PROMPT).attention_mask.sum())} tokens")
    print("| mode | total s | per frame s | preprocess s | preprocess share | GFLOP/s | max |dR| vs batched |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        gflops = GFLOP_PER_IMAGE * r.frames / max(r.total_s - r.preprocess_s, 1e-9)
        print(f"| {r.mode} | {r.total_s:.2f} | {r.total_s / r.frames:.3f} | {r.preprocess_s:.3f} | "
              f"{100 * r.preprocess_s / r.total_s:.1f}% | {gflops:.0f} | {(r.rewards - ref).abs().max().item():.2e} |")
    print(f"\nspeed-up batched vs one at a time: {rows[1].total_s / rows[0].total_s:.2f}x")


if __name__ == "__main__":
    main()
