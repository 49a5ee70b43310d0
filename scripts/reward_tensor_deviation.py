"""How far ImageReward's tensor preprocessing path is from PIL-exact, on real-size frames (832x480 by default).

Compares, for video-like frames (smooth gradients, a moving blob, fine texture, sensor noise) and white noise:
  pil     - the default: uint8 frames copied to the host, Pillow bicubic resize, centre crop
  tensor  - `preprocessing="tensor"`: Pillow's integer resampling re-done in torch on the scorer's device
  interp  - for reference only: torch.nn.functional.interpolate(bicubic, antialias=True) in float32, rounded
on the uint8 crops (grey levels) and on the rewards of a random-weight scorer (tiny, or the real ImageReward
architecture with --arch real). Prints a markdown table; --json writes the figures.

    .venv/bin/python scripts/reward_tensor_deviation.py [--frames 12] [--blocks 3] [--arch tiny|real] [--device cpu]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sdvg_core.demo.vocab import synthetic_tiny_config, write_synthetic_vocab  # noqa: E402
from sdvg_core.io.reward_files import count_vocab_lines, random_scorer, read_vocab_bytes  # noqa: E402
from sdvg_core.models.reward_config import EXTRA_SPECIAL_TOKENS, IMAGEREWARD_V1  # noqa: E402
from sdvg_core.models.reward_preprocess import (crop_offsets, frames_to_uint8, preprocess_uint8,  # noqa: E402
                                                 preprocess_uint8_tensor, resized_hw)
from sdvg_core.demo.frames import natural_frames  # noqa: E402

PROMPT = "a red fox runs through deep snow at sunset, cinematic"


def interp_crops(frames_u8: torch.Tensor, size: int = 224) -> torch.Tensor:
    """torch's own antialiased bicubic (float32), rounded to uint8, centre crop: the 'closest torch op' baseline."""
    n, h, w, _ = frames_u8.shape
    new_h, new_w = resized_hw(h, w, size)
    top, left = crop_offsets(new_h, new_w, size)
    x = frames_u8.permute(0, 3, 1, 2).float()
    y = F.interpolate(x, size=(new_h, new_w), mode="bicubic", antialias=True, align_corners=False)
    return y.round().clamp(0, 255).to(torch.uint8)[:, :, top:top + size, left:left + size].contiguous()


def make_scorer(arch: str, device: str, workdir: Path):
    vocab = write_synthetic_vocab(workdir / "vocab.txt")
    if arch == "tiny":
        cfg = synthetic_tiny_config(vocab)
    else:  # the real ImageReward-v1.0 widths and depths, random weights, a synthetic vocabulary of the same use
        cfg = IMAGEREWARD_V1.with_vocab(count_vocab_lines(read_vocab_bytes(vocab)) + len(EXTRA_SPECIAL_TOKENS))
    return random_scorer(cfg, vocab, seed=4, device=device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def level_stats(a: torch.Tensor, b: torch.Tensor) -> dict:
    d = (a.int() - b.int()).abs()
    return {"max_levels": int(d.max()), "mean_levels": float(d.float().mean()), "pixels_differing": float((d > 0).float().mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12, help="frames per block (12 = one SDVG block)")
    ap.add_argument("--blocks", type=int, default=3, help="blocks of video-like frames (one seed each)")
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--arch", choices=("tiny", "real"), default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    scorer = make_scorer(a.arch, a.device, Path(tempfile.mkdtemp(prefix="sdvg-dev-")))
    sets = {f"video-like seed {s}": natural_frames(a.frames, a.height, a.width, s) for s in range(a.blocks)}
    g = torch.Generator().manual_seed(99)
    sets["white noise"] = torch.rand(a.frames, a.height, a.width, 3, generator=g)
    rows, seconds = [], {"pil": 0.0, "tensor": 0.0}
    for name, frames in sets.items():
        frames = frames.to(a.device)
        u8 = frames_to_uint8(frames)
        sync(a.device)
        t0 = time.perf_counter()
        pil = preprocess_uint8(u8.cpu())
        t1 = time.perf_counter()
        ten = preprocess_uint8_tensor(u8)
        sync(a.device)
        t2 = time.perf_counter()
        seconds["pil"] += t1 - t0
        seconds["tensor"] += t2 - t1
        itp = interp_crops(u8.cpu())
        r_pil = scorer.score_pixels(pil, PROMPT)
        r_ten = scorer.score_pixels(ten, PROMPT)
        r_itp = scorer.score_pixels(itp, PROMPT)
        rows.append({"frames": name, "n": a.frames,
                     "tensor_vs_pil": {**level_stats(ten.cpu(), pil), "reward_max_abs": float((r_ten - r_pil).abs().max())},
                     "interp_vs_pil": {**level_stats(itp, pil), "reward_max_abs": float((r_itp - r_pil).abs().max())},
                     "reward_spread": float(r_pil.max() - r_pil.min())})
    print(f"{a.width}x{a.height}, {a.frames} frames per set, scorer {a.arch} (random weights), device {a.device}, "
          f"torch {torch.__version__}")
    print("| frames | tensor vs PIL: max levels / pixels differing / max reward diff "
          "| interpolate vs PIL: max levels / mean levels / pixels differing / max reward diff | reward spread |")
    print("|---|---|---|---|")
    for r in rows:
        t, i = r["tensor_vs_pil"], r["interp_vs_pil"]
        print(f"| {r['frames']} | {t['max_levels']} / {t['pixels_differing']:.2%} / {t['reward_max_abs']:.2e} "
              f"| {i['max_levels']} / {i['mean_levels']:.3f} / {i['pixels_differing']:.2%} / {i['reward_max_abs']:.2e} "
              f"| {r['reward_spread']:.3f} |")
    n = a.frames * len(sets)
    print(f"preprocessing time per frame (uint8 frames -> crops; pil includes the copy to the host): "
          f"pil {1e3 * seconds['pil'] / n:.1f} ms, tensor {1e3 * seconds['tensor'] / n:.1f} ms")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
                                      "ms_per_frame": {k: 1e3 * v / n for k, v in seconds.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
