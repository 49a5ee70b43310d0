"""Command-line SDVG generation: tiny random models by default, real model files when given.

    python -m sdvg_core.demo.cli                      # tiny default, writes out/demo/sdvg.mp4 + report.json
    python -m sdvg_core.demo.cli --drafter self_forcing_dmd.pt --target krea-realtime-video-14b.safetensors \
        --vae Wan2.1_VAE.pth --reward ImageReward.pt --embeddings prompt.safetensors --device cuda

Prints a per-block table; the report JSON holds every score, decision, forward count and phase time.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from ..engine.engine import Engine, EngineConfig, ProgressEvent
from ..io.checkpoint import CheckpointError, load_wan_dit, read_state_dict
from ..engine.policy import DEFAULT_TAU, DraftOnly, RandomPolicy, TargetOnly, ThresholdPolicy
from ..engine.recipes import recipe_by_name
from ..engine.report import build_report
from ..engine.state import GenerationSpec, PromptConditioning
from ..io.text import demo_embeddings, encode_umt5, load_embeddings
from .tiny import DEMO_PROMPT, tiny_models
from ..models.vae import WanVAE
from ..io.video import write_video
from ..models.wan import CausalWan

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Tiny-model defaults: small enough for a CPU in seconds (the real models use 832x480 and 9 blocks).
TINY_SIZE = (96, 64)
TINY_BLOCKS = 6
# The tiny random ImageReward's rewards are not on the real model's scale: at the paper's tau = -0.7
# it rejects every draft of the demo prompt. -0.8 lets the demo show both outcomes (1 of 5 rejected).
TINY_DEMO_TAU = -0.8
REAL_SIZE = (832, 480)  # Self-Forcing / Krea / SDVG paper resolution
REAL_BLOCKS = 9  # SDVG paper: 9 blocks = 27 latent frames


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sdvg_core.demo.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default=None, help="text prompt (default: the demo prompt, or the embeddings file's prompt)")
    p.add_argument("--out", default="out/demo", help="output folder for the video and report.json")
    p.add_argument("--format", choices=["mp4", "webp"], default="mp4")
    p.add_argument("--width", type=int, default=None)
    p.add_argument("--height", type=int, default=None)
    p.add_argument("--blocks", type=int, default=None, help="number of 3-latent-frame blocks")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--policy", choices=["sdvg", "target-only", "draft-only", "accept-all", "random"], default="sdvg",
                   help="sdvg = ImageReward threshold; accept-all = block 0 from the target, every other draft kept")
    p.add_argument("--tau", type=float, default=None,
                   help=f"accept a draft when its score >= tau (default {DEFAULT_TAU}; {TINY_DEMO_TAU} for the tiny models)")
    p.add_argument("--aggregation", choices=["min", "mean"], default="min")
    p.add_argument("--no-force-reject-first", action="store_true", help="let block 0 be drafted and accepted")
    p.add_argument("--accept-rate", type=float, default=0.73, help="for --policy random")
    p.add_argument("--recipe", choices=["krea", "self_forcing"], default="krea")
    p.add_argument("--decode-rule", choices=["standard", "krea"], default="standard",
                   help="standard = equal to a one-shot decode; krea = the VAE cache rule of the published runs")
    p.add_argument("--drafter", help="drafter checkpoint (Self-Forcing self_forcing_dmd.pt or .safetensors)")
    p.add_argument("--pt-entry", choices=["generator_ema", "generator"], default="generator_ema",
                   help="entry of a Self-Forcing .pt (the published SDVG loaded 'generator')")
    p.add_argument("--target", help="target checkpoint (krea-realtime-video-14b.safetensors)")
    p.add_argument("--vae", help="Wan 2.1 VAE (Wan2.1_VAE.pth or wan_2.1_vae.safetensors)")
    p.add_argument("--reward", help="ImageReward.pt")
    p.add_argument("--vocab", help="bert-base-uncased vocab.txt (default: next to --reward)")
    p.add_argument("--embeddings", help="prompt embeddings .safetensors (umT5 output, [1, 512, 4096])")
    p.add_argument("--umt5", help="local umT5 folder (Hugging Face layout) to encode --prompt")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="DiT dtype (default bf16 on GPU, fp32 on CPU)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _real_models(a: argparse.Namespace, dtype: torch.dtype):
    """Load the real files; one message lists everything missing."""
    needs_draft = a.policy != "target-only"
    needs_score = a.policy == "sdvg" and not math.isinf(a.tau if a.tau is not None else DEFAULT_TAU)
    missing = [flag for flag, need in (("--target", True), ("--vae", True), ("--drafter", needs_draft),
                                       ("--reward", needs_score)) if need and not getattr(a, flag[2:])]
    if not (a.embeddings or a.umt5):
        missing.append("--embeddings or --umt5")
    if missing:
        raise SystemExit(f"real-model mode needs {', '.join(missing)} (policy {a.policy}); "
                         f"omit every model flag to run the tiny embedded default")
    from ..models.reward import ImageRewardScorer

    target_net, tcfg, trep = load_wan_dit(a.target, dtype=dtype, device=a.device)
    print(f"target: {trep.describe()}")
    target = CausalWan(target_net, tcfg, key=f"{a.target}:{dtype}")
    drafter = None
    if needs_draft:
        dnet, dcfg, drep = load_wan_dit(a.drafter, dtype=dtype, device=a.device, pt_entry=a.pt_entry)
        print(f"drafter: {drep.describe()}")
        drafter = CausalWan(dnet, dcfg, key=f"{a.drafter}:{a.pt_entry}:{dtype}")
    sd, _ = read_state_dict(a.vae)
    vae_dtype = torch.float32 if a.device == "cpu" else torch.float16
    vae = WanVAE.from_state_dict(sd, dtype=vae_dtype, device=a.device)
    scorer = ImageRewardScorer.from_files(a.reward, a.vocab, device=a.device) if needs_score else None
    return drafter, target, vae, scorer


def _prompt(a: argparse.Namespace, text_dim: int, real: bool) -> PromptConditioning:
    if a.embeddings:
        stored, emb = load_embeddings(a.embeddings)
        return PromptConditioning.make(a.prompt or stored, emb)
    text = a.prompt or DEMO_PROMPT
    if a.umt5:
        return PromptConditioning.make(text, encode_umt5(a.umt5, text, device=a.device))
    return PromptConditioning.make(text, demo_embeddings(text, text_dim))


def _policy(a: argparse.Namespace):
    force = not a.no_force_reject_first
    if a.policy == "sdvg":
        return ThresholdPolicy(tau=a.tau, aggregation=a.aggregation, force_reject_first=force)
    if a.policy == "target-only":
        return TargetOnly()
    if a.policy == "draft-only":
        return DraftOnly(force_reject_first=False)
    if a.policy == "accept-all":
        return DraftOnly(force_reject_first=True)
    return RandomPolicy(a.accept_rate, seed=a.seed, force_reject_first=force)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    real = any(getattr(a, k) for k in ("drafter", "target", "vae", "reward"))
    dtype = DTYPES[a.dtype] if a.dtype else (torch.bfloat16 if a.device != "cpu" else torch.float32)
    try:
        if real:
            drafter, target, vae, scorer = _real_models(a, dtype)
            size, blocks = REAL_SIZE, REAL_BLOCKS
        else:
            torch.set_num_threads(1)  # tiny models: threads only add overhead
            m = tiny_models(seed=0, workdir=Path(a.out) / "tiny_vocab")
            drafter, target, vae, scorer = m.drafter, m.target, m.vae, m.scorer
            size, blocks = TINY_SIZE, TINY_BLOCKS
        if a.tau is None:
            a.tau = DEFAULT_TAU if real else TINY_DEMO_TAU
        width, height = a.width or size[0], a.height or size[1]
        prompt = _prompt(a, target.cfg.text_dim, real)
        spec = GenerationSpec(prompt, width, height, a.blocks or blocks, a.seed)
        policy = _policy(a)
        engine = Engine(target, vae, drafter, scorer, EngineConfig(recipe=recipe_by_name(a.recipe), decode_rule=a.decode_rule))
    except (CheckpointError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    bar = None
    if not a.quiet:
        from tqdm import tqdm

        bar = tqdm(total=spec.num_blocks, unit="block", desc="SDVG")

        def progress(ev: ProgressEvent) -> None:
            if ev.kind == "step":
                bar.set_postfix_str(f"block {ev.block} {ev.role} step {ev.step}/{ev.num_steps}", refresh=False)
            elif ev.kind == "block":
                bar.update(1)
                bar.set_postfix_str(f"block {ev.block} -> {ev.record.producer} ({ev.record.decision})")

        engine.callbacks.progress = progress
    t0 = time.perf_counter()
    state = engine.generate(spec, policy)
    frames = engine.frames(state)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    video = write_video(frames, out / f"sdvg.{a.format}")
    report = build_report(state, policy.describe(), engine.recipe, engine.plan.num_steps, wall_seconds=wall,
                          meta={"prompt": prompt.text, "size": f"{width}x{height}", "seed": str(a.seed),
                                "models": "real" if real else "tiny random (embedded default)",
                                "decode_rule": a.decode_rule, "frames": str(frames.shape[0])})
    (out / "report.json").write_text(report.to_json())
    print(report.table())
    print(f"wrote {video} ({frames.shape[0]} frames, {width}x{height}) and {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
