"""The GPU check's routing-cost phase (UNVERIFIED until a device runs it): what routing one block costs with the full
VAE and with the tiny decoder (TAEHV at taew2_1's widths, random weights), at the run's size.

Per decoder: a block's latent frames decoded after a first block (the steady state a draft meets: from the
decoder's cache / memory after one committed block, which the decode leaves unchanged), min over `reps` timed
calls after one untimed call; ImageReward on the block's frames, likewise; the device's peak above what was allocated
before one decode (CUDA only). `dry_run_seconds` prices the phase for the dry run's estimate.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from units import CallClass

from sdvg_core.engine.engine import to_image
from sdvg_core.engine.route_decoder import WAN_VAE, decoder_name

LABEL = "UNVERIFIED: the routing-cost phase has never run on a GPU"
REPS = 3  # timed calls per decoder (and per scoring); min reported
SEED = 11  # the latents' seed (any: a decode's cost does not depend on the values)


def _timed(fn: Callable[[], object], reps: int, sync: Callable[[], None]) -> tuple[float, object]:
    """(min seconds over `reps` calls after one untimed call, the last result)."""
    out = fn()
    best = float("inf")
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def phase(models, spec, prompt: str, reps: int = REPS, sync: Callable[[], None] | None = None) -> dict:
    """Routing one block of `spec` with each decoder of `models` (`vae`, and `route_vae` when there is one)."""
    cuda = models.target.device.type == "cuda"
    sync = sync or (torch.cuda.synchronize if cuda else (lambda: None))
    h, w = spec.latent_hw
    F, C = spec.frames_per_block, models.target.cfg.in_dim
    gen = torch.Generator().manual_seed(SEED)
    first, block = (torch.randn(1, C, F, h, w, generator=gen).to(models.target.device) for _ in range(2))
    decoders = [(WAN_VAE, models.vae)] + ([(decoder_name(models.route_vae), models.route_vae)]
                                         if models.route_vae is not None else [])
    out: dict = {"label": LABEL, "size": f"{spec.width}x{spec.height}", "frames_per_block": F, "reps": reps,
                 "decoders": {}}
    for name, dec in decoders:
        _, cache = dec.decode_stream(first.to(dec.dtype), None)
        z = block.to(dec.dtype)
        decode_s, (pixels, _) = _timed(lambda: dec.decode_stream(z, cache), reps, sync)
        peak = None
        if cuda:
            sync()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            dec.decode_stream(z, cache)
            sync()
            peak = torch.cuda.max_memory_allocated() - base
        frames = to_image(pixels.clamp(-1, 1)).cpu()  # [12, H, W, 3] what the engine hands the scorer
        score_s, _ = _timed(lambda: models.scorer.score_frames(frames, prompt), reps, sync)
        out["decoders"][name] = {"decode_s": decode_s, "score_s": score_s, "total_s": decode_s + score_s,
                                 "decode_peak_bytes": peak, "frames": int(frames.shape[0])}
    if len(out["decoders"]) == 2:
        (_, a), (_, b) = out["decoders"].items()
        out["decode_ratio"] = a["decode_s"] / b["decode_s"] if b["decode_s"] else None  # VAE / tiny
    return out


def dry_run_seconds(unit_s: dict[CallClass, float], frames_per_block: int, reps: int = REPS) -> float:
    """The phase's estimated seconds from per-unit estimates: per decoder a first block and reps + 2 block decodes,
    and reps + 1 scorings of a block's 12 frames."""
    decode = sum(unit_s.get(CallClass(k), 0.0) for k in ("decode", "route_decode"))
    first = sum(unit_s.get(CallClass(k), 0.0) for k in ("decode_first", "route_decode_first"))
    score = unit_s.get(CallClass("score_frame"), 0.0)
    return (first + (frames_per_block - 1 + (reps + 2) * frames_per_block) * decode
            + 2 * (reps + 1) * 4 * frames_per_block * score)


def markdown(doc: dict) -> str:
    """One paragraph: per decoder the block's decode and scoring, the ratio."""
    if "skipped" in doc:
        return f"Routing-cost phase ({doc['label']}): skipped, {doc['skipped']}.\n"
    parts = []
    for name, d in doc["decoders"].items():
        peak = "" if d["decode_peak_bytes"] is None else f", decode peak {d['decode_peak_bytes'] / 2**30:.2f} GiB"
        parts.append(f"{name} {d['total_s'] * 1e3:.1f} ms (decode {d['decode_s'] * 1e3:.1f} + score "
                     f"{d['score_s'] * 1e3:.1f}{peak})")
    ratio = doc.get("decode_ratio")
    return (f"Routing-cost phase ({doc['label']}; one block of {doc['frames_per_block']} latent frames at {doc['size']}, "
            f"min of {doc['reps']}): " + "; ".join(parts)
            + (f"; decode ratio VAE / tiny {ratio:.1f}x" if ratio else "") + ".\n")
