"""Command-line SDVG generation: tiny random models by default, real model files when given.

    python -m sdvg_core.demo                          # tiny default, writes out/demo/sdvg.mp4 + report.json
    python -m sdvg_core.demo --drafter self_forcing_dmd.pt --target krea-realtime-video-14b.safetensors \
        --vae Wan2.1_VAE.pth --reward ImageReward.pt --embeddings prompt.safetensors --device cuda

Prints a per-block table; the report JSON holds every score, decision, forward count and phase time
(docs/report-json.md), and report.png plots the block scores against tau. Every flag and file is checked
before any model is loaded; a usage or input error exits with status 2 and names every problem at once.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from ..engine.engine import Engine, EngineConfig, ProgressEvent
from ..engine.memo import TieredMemo
from ..io.checkpoint import CheckpointError
from ..io.drafters import DEFAULT_DRAFTER_KIND, DRAFTER_KINDS, FRAMEWISE_KIND, drafter_problems
from ..io.model_files import DTYPES, load_model_files
from ..engine.policy import DEFAULT_TAU, DraftOnly, RandomPolicy, TargetOnly, ThresholdPolicy
from ..engine.recipes import RECIPE_NAMES, recipe_arg, recipe_by_name
from ..engine.report import build_report
from ..engine.plot import render_report_plot
from ..engine.state import SIZE_MULTIPLE, GenerationSpec, PromptConditioning, PromptSchedule
from ..io.reward_files import ImageRewardError, find_vocab
from ..io.prompt_schedule import ScheduleError, encode_schedule, read_schedule
from ..io.text import UMT5Encoder, demo_embeddings, encode_umt5, load_embeddings, umt5_folders
from .tiny import DEMO_PROMPT, tiny_models
from ..io.video import VideoWriter

# Tiny-model defaults: small enough for a CPU in seconds (the real models use 832x480 and 9 blocks).
TINY_SIZE = (96, 64)
TINY_BLOCKS = 6
# The tiny random ImageReward's rewards are not on the real model's scale: at the paper's tau = -0.7
# it rejects every draft of the demo prompt. -0.8 lets the demo show both outcomes (1 of 5 rejected).
TINY_DEMO_TAU = -0.8
REAL_SIZE = (832, 480)  # Self-Forcing / Krea / SDVG paper resolution
REAL_BLOCKS = 9  # SDVG paper: 9 blocks = 27 latent frames
USAGE_ERROR = 2  # exit status of every usage or input error (argparse's own convention)
MODEL_FLAGS = ("drafter", "target", "vae", "reward")  # any of these switches the demo to real-model mode
# Flags that only mean something with --drafter (the tiny default has its own drafter): given alone, a problem.
DRAFTER_FLAGS = ("drafter_lora", "drafter_lora_alpha", "pt_entry")




def add_recipe_args(p: argparse.ArgumentParser) -> None:
    """--recipe / --drafter-recipe / --target-recipe: a context recipe per model (the demo, sdvg_eval)."""
    names = f"{', '.join(RECIPE_NAMES)}; parameters after a colon, e.g. longlive:window=15,sink=3"
    p.add_argument("--recipe", type=recipe_arg, default="krea",
                   help=f"context recipe of both models (krea: the published SDVG pairing; {names})")
    p.add_argument("--drafter-recipe", type=recipe_arg, default=None,
                   help="the drafter's own recipe (default: --recipe; a LongLive drafter: longlive)")
    p.add_argument("--target-recipe", type=recipe_arg, default=None,
                   help="the target's own recipe (default: --recipe)")


def add_drafter_kind_args(p: argparse.ArgumentParser, default_kind: str | None) -> None:
    """--drafter-kind, --drafter-lora, --drafter-lora-alpha, --pt-entry: how a drafter file is read (io/drafters.py)."""
    p.add_argument("--drafter-kind", choices=[*DRAFTER_KINDS, FRAMEWISE_KIND], default=default_kind,
                   help=f"which drafter the file is: its .pt entry, LoRA and default recipe (default "
                        f"{DEFAULT_DRAFTER_KIND}; " + "; ".join(f"{k.name}: {k.title}" for k in DRAFTER_KINDS.values())
                        + f"). {FRAMEWISE_KIND} is refused: 1-frame blocks")
    p.add_argument("--drafter-lora", help="peft LoRA merged into the drafter at load (LongLive: lora.pt)")
    p.add_argument("--drafter-lora-alpha", type=float, default=None,
                   help="the LoRA's alpha (scale alpha/rank; default: the kind's, 256 for LongLive, else the rank)")
    p.add_argument("--pt-entry", choices=["generator_ema", "generator"], default=None,
                   help="entry of a .pt drafter (default: the kind's: self_forcing generator_ema, causal_forcing and "
                        "longlive generator; the published SDVG loaded 'generator')")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sdvg_core.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default=None, help="text prompt (default: the demo prompt, or the embeddings file's prompt)")
    p.add_argument("--out", default="out/demo", help="output folder for the video and report.json")
    p.add_argument("--format", choices=["mp4", "webp"], default="mp4")
    p.add_argument("--width", type=int, default=None,
                   help=f"pixels, a multiple of {SIZE_MULTIPLE} (default {TINY_SIZE[0]} tiny, {REAL_SIZE[0]} real)")
    p.add_argument("--height", type=int, default=None,
                   help=f"pixels, a multiple of {SIZE_MULTIPLE} (default {TINY_SIZE[1]} tiny, {REAL_SIZE[1]} real)")
    p.add_argument("--blocks", type=int, default=None,
                   help=f"number of 3-latent-frame blocks (default {TINY_BLOCKS} tiny, {REAL_BLOCKS} real)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--policy", choices=["sdvg", "target-only", "draft-only", "accept-all", "random"], default="sdvg",
                   help="sdvg = ImageReward threshold; accept-all = block 0 from the target, every other draft kept")
    p.add_argument("--tau", type=float, default=None,
                   help=f"accept a draft when its score >= tau (default {DEFAULT_TAU}; {TINY_DEMO_TAU} for the tiny models)")
    p.add_argument("--aggregation", choices=["min", "mean"], default="min")
    p.add_argument("--no-force-reject-first", action="store_true", help="let block 0 be drafted and accepted")
    p.add_argument("--accept-rate", type=float, default=0.73, help="for --policy random")
    add_recipe_args(p)
    p.add_argument("--decode-rule", choices=["standard", "krea"], default="standard",
                   help="standard = equal to a one-shot decode; krea = the VAE cache rule of the published runs")
    p.add_argument("--drafter", help="drafter checkpoint (Self-Forcing self_forcing_dmd.pt, Causal Forcing "
                                     "chunkwise/causal_forcing.pt, LongLive longlive_base.pt, or .safetensors)")
    add_drafter_kind_args(p, DEFAULT_DRAFTER_KIND)
    p.add_argument("--target", help="target checkpoint (krea-realtime-video-14b.safetensors)")
    p.add_argument("--vae", help="Wan 2.1 VAE (Wan2.1_VAE.pth or wan_2.1_vae.safetensors)")
    p.add_argument("--reward", help="ImageReward.pt")
    p.add_argument("--vocab", help="bert-base-uncased vocab.txt (default: next to --reward)")
    p.add_argument("--embeddings", help="prompt embeddings .safetensors (umT5 output, [1, 512, 4096])")
    p.add_argument("--prompt-schedule", metavar="FILE",
                   help="prompts that change between blocks: `block: prompt` lines, or a JSON list of "
                        "{\"block\": n, \"prompt\": ..., \"embeddings\": optional file}; the first entry starts at "
                        "block 0. Real models: --umt5 encodes each prompt unless its entry names an embeddings file")
    p.add_argument("--umt5", help="local umT5 folder (Hugging Face layout) to encode --prompt")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="DiT dtype (default bf16 on GPU, fp32 on CPU)")
    p.add_argument("--memo-gb", type=float, default=0.0,
                   help="GiB of derived data kept for re-runs in this process (default 0: one run reuses nothing "
                        "across runs; what the run itself needs is held apart from this budget)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _needs(a: argparse.Namespace) -> tuple[bool, bool]:
    """(needs the drafter, needs ImageReward) for the chosen policy and tau."""
    needs_draft = a.policy != "target-only"
    needs_score = a.policy == "sdvg" and not math.isinf(a.tau if a.tau is not None else DEFAULT_TAU)
    return needs_draft, needs_score


def _file_problem(flag: str, path: str) -> str | None:
    """Why a given file cannot be used (missing, a folder, unreadable), or None."""
    p = Path(path).expanduser()
    if not p.exists():
        return f"{flag} {p}: file not found (looked in {p.parent.resolve()})"
    if p.is_dir():
        return f"{flag} {p}: is a folder; give the file itself"
    if not os.access(p, os.R_OK):
        return f"{flag} {p}: not readable (check its permissions)"
    return None


def recipe_problems(a: argparse.Namespace, real: bool) -> list[str]:
    """Each recipe flag's recipe checked against the video's blocks (a LongLive window smaller than a block, a
    sink larger than the window, ...), as Engine.start would, before anything loads."""
    blocks = a.blocks if a.blocks and a.blocks >= 1 else (REAL_BLOCKS if real else TINY_BLOCKS)
    size = REAL_SIZE if real else TINY_SIZE
    # the recipes' rules depend on the block and video length, not on the frame size (checked on its own)
    probe = GenerationSpec(PromptConditioning.make("recipe check", torch.zeros(1, 1, 1)), size[0], size[1], blocks, 0)
    problems = []
    for flag, name in (("--recipe", a.recipe), ("--drafter-recipe", a.drafter_recipe),
                       ("--target-recipe", a.target_recipe)):
        if name:
            try:
                recipe_by_name(name).validate(probe)
            except ValueError as e:
                problems.append(f"{flag} {name}: {e}")
    return problems


def preflight(a: argparse.Namespace, real: bool) -> list[str]:
    """Every problem with the flags and input files, found without loading anything (empty list: go)."""
    problems: list[str] = []
    for name, v in (("--width", a.width), ("--height", a.height), ("--blocks", a.blocks)):
        if v is not None and v < 1:  # 0 used to fall back to the default silently
            problems.append(f"{name} {v} must be >= 1 (leave it out for the default)")
    for name, v in (("--width", a.width), ("--height", a.height)):
        if v is not None and v >= 1 and v % SIZE_MULTIPLE:
            near = max(SIZE_MULTIPLE, round(v / SIZE_MULTIPLE) * SIZE_MULTIPLE)
            problems.append(f"{name} {v} is not a multiple of {SIZE_MULTIPLE} (8x VAE downsampling x 2x DiT patch); "
                            f"try {near}")
    if a.tau is not None and math.isnan(a.tau):
        problems.append("--tau nan is not a number; give e.g. -0.7 (inf and -inf are allowed)")
    if not a.memo_gb >= 0:
        problems.append(f"--memo-gb {a.memo_gb} must be >= 0")
    if not 0.0 <= a.accept_rate <= 1.0:
        problems.append(f"--accept-rate {a.accept_rate} must be between 0 and 1")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        problems.append(f"--out {out}: exists and is not a folder; give a folder for the video and report.json")
    files = [(f"--{k.replace('_', '-')}", getattr(a, k)) for k in (*MODEL_FLAGS, "drafter_lora", "embeddings")
             if getattr(a, k)]
    if not a.drafter:
        given = [f"--{k.replace('_', '-')}" for k in DRAFTER_FLAGS if getattr(a, k) is not None]
        given += ["--drafter-kind"] if a.drafter_kind != DEFAULT_DRAFTER_KIND else []
        if given:
            problems.append(f"{', '.join(given)} given without --drafter (they describe the drafter file)")
    if real:
        needs_draft, needs_score = _needs(a)
        required = (("--target", "the 14B target checkpoint"), ("--vae", "the Wan 2.1 VAE"),
                    ("--drafter", "the 1.3B drafter checkpoint") if needs_draft else None,
                    ("--reward", "ImageReward.pt") if needs_score else None)
        for flag, what in filter(None, required):
            if not getattr(a, flag[2:]):
                problems.append(f"{flag} is missing ({what}; needed by --policy {a.policy})")
        if needs_draft and a.drafter:
            problems += [f"--drafter: {msg}" for msg in drafter_problems(a.drafter, a.drafter_kind, a.drafter_lora)]
        if not (a.embeddings or a.umt5):
            problems.append("--embeddings or --umt5 is missing (the prompt's umT5 embeddings, or a local umT5 folder "
                            "to encode --prompt; python -m sdvg_core.io.encode_prompt writes an embeddings file)")
        if needs_score and a.reward and Path(a.reward).expanduser().is_file():
            try:
                find_vocab(a.reward, a.vocab)
            except (ImageRewardError, ValueError) as e:
                problems.append(f"--vocab: {e}")
    problems += [msg for flag, path in files if (msg := _file_problem(flag, path))]
    if a.embeddings and not _file_problem("--embeddings", a.embeddings):
        try:
            load_embeddings(a.embeddings)  # a few MB: cheap, and a broken file is known before the models load
        except CheckpointError as e:
            problems.append(f"--embeddings: {e}")
    if a.umt5:
        try:
            umt5_folders(a.umt5)
        except CheckpointError as e:
            problems.append(f"--umt5: {e}")
    problems += _schedule_problems(a, real)
    problems += recipe_problems(a, real)
    return problems


def _schedule_problems(a: argparse.Namespace, real: bool) -> list[str]:
    """A schedule file that cannot be read, clashes with the single-prompt flags, or ends past --blocks."""
    if not a.prompt_schedule:
        return []
    clash = [f for f, v in (("--prompt", a.prompt), ("--embeddings", a.embeddings)) if v]
    problems = [f"--prompt-schedule with {', '.join(clash)}: give the prompts in the schedule file only"] if clash else []
    try:
        entries = read_schedule(a.prompt_schedule)
    except ScheduleError as e:
        return problems + [f"--prompt-schedule: {e}"]
    blocks = a.blocks or (REAL_BLOCKS if real else TINY_BLOCKS)
    late = [b for b, _ in entries if b >= blocks]
    if late:
        problems.append(f"--prompt-schedule: entries start at block {late} but the video has {blocks} blocks (0..{blocks - 1})")
    for b, src in entries:
        if src.embeddings is not None and (msg := _file_problem(f"--prompt-schedule (block {b})", str(src.embeddings))):
            problems.append(msg)
    if real and not a.umt5 and any(src.embeddings is None for _, src in entries):
        problems.append("--prompt-schedule: entries without an embeddings file need --umt5 (a local umT5 folder) "
                        "to encode their prompts")
    return problems


def _real_models(a: argparse.Namespace, dtype: torch.dtype):
    """Load the real files (preflight has already checked that each one is there)."""
    needs_draft, needs_score = _needs(a)
    m = load_model_files(target=a.target, vae=a.vae, drafter=a.drafter if needs_draft else None,
                         reward=a.reward if needs_score else None, vocab=a.vocab, dtype=dtype, device=a.device,
                         pt_entry=a.pt_entry, drafter_kind=a.drafter_kind,
                         drafter_lora=a.drafter_lora if needs_draft else None, drafter_lora_alpha=a.drafter_lora_alpha)
    for line in m.notes:
        print(line)
    return m.drafter, m.target, m.vae, m.scorer


def _schedule(a: argparse.Namespace, text_dim: int, real: bool) -> PromptSchedule[PromptConditioning]:
    """The prompt schedule: the --prompt-schedule file's entries (each encoded with --umt5, read from its own
    embeddings file, or given the tiny demo's stand-in embeddings), else the one prompt from block 0."""
    if not a.prompt_schedule:
        return PromptSchedule.one(_prompt(a, text_dim, real))
    if real:
        encode = UMT5Encoder(a.umt5, device=a.device) if a.umt5 else None
    else:
        encode = lambda text: demo_embeddings(text, text_dim)  # noqa: E731 (the tiny stand-in of umT5)
    return encode_schedule(read_schedule(a.prompt_schedule), encode, load=lambda p: load_embeddings(p)[1])


def _prompt(a: argparse.Namespace, text_dim: int, real: bool) -> PromptConditioning:
    if a.embeddings:
        stored, emb = load_embeddings(a.embeddings)
        return PromptConditioning.make(a.prompt or stored, emb)
    text = a.prompt or DEMO_PROMPT
    if a.umt5:
        return PromptConditioning.make(text, encode_umt5(a.umt5, text, device=a.device))
    return PromptConditioning.make(text, demo_embeddings(text, text_dim))


def _engine_config(a: argparse.Namespace, real: bool) -> EngineConfig:
    """--recipe sets both roles; --drafter-recipe / --target-recipe override one. A drafter trained for its own
    long-video recipe (LongLive) runs it unless told otherwise; Self-Forcing-family drafters run the published
    pairing's recipe (--recipe)."""
    drafter_recipe = a.drafter_recipe
    if drafter_recipe is None and real and a.drafter:
        own = DRAFTER_KINDS[a.drafter_kind].default_recipe if a.drafter_kind in DRAFTER_KINDS else None
        if own is not None and own != "self_forcing" and own in RECIPE_NAMES:
            drafter_recipe = own
    return EngineConfig(recipe=recipe_by_name(a.recipe), decode_rule=a.decode_rule,
                        drafter_recipe=recipe_by_name(drafter_recipe) if drafter_recipe else None,
                        target_recipe=recipe_by_name(a.target_recipe) if a.target_recipe else None)


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
    try:
        a = parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (status 2) or --help (0)
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    real = any(getattr(a, k) for k in MODEL_FLAGS)
    problems = preflight(a, real)
    if problems:
        mode = "real-model mode" if real else "the tiny default"
        print(f"error: {len(problems)} problem(s) with the arguments ({mode}); nothing was loaded:\n  - "
              + "\n  - ".join(problems)
              + ("\n(omit every model flag, --drafter --target --vae --reward, to run the tiny embedded default)"
                 if real else ""), file=sys.stderr)
        return USAGE_ERROR
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
        schedule = _schedule(a, target.cfg.text_dim, real)
        spec = GenerationSpec(schedule, width, height, a.blocks or blocks, a.seed)
        prompt = spec.prompt
        policy = _policy(a)
        memo_bytes = int(a.memo_gb * 2**30)
        engine = Engine(target, vae, drafter, scorer, _engine_config(a, real),
                        memo=TieredMemo.split(memo_bytes))
    except (CheckpointError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR

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
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # each block's frames go to the file as it commits: a long video never sits in memory
    with VideoWriter(out / f"sdvg.{a.format}") as writer:
        state = engine.generate(spec, policy,
                                on_block=lambda eng, st: writer.write(eng.block_frames(st, st.next_block - 1)))
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    video, n_frames = writer.path, writer.frames_written
    report = build_report(state, policy.describe(), engine.recipe, engine.plan.num_steps, wall_seconds=wall,
                          meta={"prompt": prompt.text, "size": f"{width}x{height}", "seed": str(a.seed),
                                "models": "real" if real else "tiny random (embedded default)",
                                "decode_rule": a.decode_rule, "frames": str(n_frames)},
                          drafter_recipe=engine.recipes["drafter"])
    data = json.loads(report.to_json())
    data.setdefault("tau", a.tau if a.policy == "sdvg" else None)  # a number, not only inside the policy text
    (out / "report.json").write_text(json.dumps(data, indent=2))
    plot = out / "report.png"
    render_report_plot(report, tau=a.tau if a.policy == "sdvg" else None).save(plot)
    print(report.table())
    print(f"wrote {video} ({n_frames} frames, {width}x{height}), {out / 'report.json'} and {plot}")
    if not real:
        print("note: the tiny models have random weights, so the video is noise; the table, report.json and "
              "report.png show what SDVG decided and what it cost")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
