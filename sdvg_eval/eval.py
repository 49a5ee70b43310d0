"""Prompt-set sweeps: every config on every (prompt, seed), one CSV row each, then the paper's table and a Pareto plot.

    python -m sdvg_eval --tiny --prompts MovieGenVideoBench.txt --limit 8 --workers 2
    python -m sdvg_eval --prompts MovieGenVideoBench.txt --drafter self_forcing_dmd.pt \
        --target krea-realtime-video-14b.safetensors --vae Wan2.1_VAE.pth --reward ImageReward.pt \
        --umt5 umt5-xxl/ --metrics visionreward:VisionReward-Video/ imagereward \
        --vr-checklist VisionReward/ --ray-address auto --out out/eval

A prompt schedule instead of a prompt file (the prompt changes between blocks; one schedule for the sweep):
    python -m sdvg_eval --tiny --prompt-schedule story.txt --seeds 1 2 3 --blocks 12 --workers 0

Rows are appended to OUT/rows.csv as each finishes; re-running the same command skips finished rows. A
(prompt, seed) unit runs all its configs on one worker over one shared memo, so a tau sweep computes the
common prefix once (OUT/summary.md reports forwards computed vs a naive sweep). `--workers 0` runs in this
process without Ray; `--ray-address` (or RAY_ADDRESS) joins a running cluster, with its token when it has one
(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token). Exit status 2: a usage or input error (nothing was
run); 1: some rows failed; 130: stopped by Ctrl-C, 143: by SIGTERM (the rows written so far stay: re-run the same
command to resume).
A cluster that cannot be joined within --ray-join-timeout seconds (default 30) stops the sweep before anything is
written.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import torch

from sdvg_core.engine.config import DEFAULT_MEMO_BYTES, EngineConfig
from sdvg_core.engine.recipes import recipe_spec
from sdvg_core.engine.state import SIZE_MULTIPLE, PromptSchedule
from sdvg_core.demo.cli_args import (REAL_BLOCKS, REAL_SIZE, TINY_BLOCKS, TINY_SIZE, USAGE_ERROR,
                                   add_compile_arg, add_drafter_kind_args, add_recipe_args, blocks_problem, compile_problem, stop_signals_raise, stopped_by,
                                   output_folder_problem, recipe_problems)
from sdvg_core.io.drafters import drafter_problems
from sdvg_core.demo.pixel_args import check_request
from sdvg_core.engine.prompt_schedule import PromptSource, ScheduleError, read_schedule
from sdvg_core.io.prompt_width import text_width, umt5_width
from sdvg_core.io.text import load_embeddings, umt5_folders
from sdvg_core.models.state_dict import CheckpointError
from sdvg_core.models.wan_config import PRESETS

from .config import DEFAULT_SEEDS, PAPER_CONFIGS, parse_configs
from .metrics import IMAGEREWARD_NOTE, MetricOptions, metric_identity, metric_name, metric_spec_problems
from .prompts import Encoder, Prompt, PromptRowError, cached_embeddings, demo_encoder, read_prompts, umt5_encoder
from .visionreward import MODES as VR_MODES, VIDEO_SOURCES as VR_VIDEO
from .records import (Appender, RunMismatch, check_results, code_version, columns, open_results, read_rows,
                      results_paths)
from .cluster import (JOIN_TIMEOUT_S, RayJoinError, auth_mode_for_join, cluster_workers, join, start_local,
                      warn_if_imported_early)
from .sweep import RunnerArgs, plan, run_local, run_ray
from .worker import DTYPES, ModelSetup, Unit, block_columns

GIB = 1 << 30
__all__ = ["main", "parse_args", "preflight", "RayJoinError", "auth_mode_for_join"]  # the last two: cluster.py


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sdvg_eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", help="one prompt per line (prompt id k = line k+1)")
    p.add_argument("--prompt-schedule", metavar="FILE",
                   help="instead of --prompts: one prompt schedule run as the sweep's only prompt (id 0), the "
                        "demo's file: `block: prompt` lines or a JSON list of {\"block\": n, \"prompt\": ..., "
                        "\"embeddings\": optional file}; each block is generated and routed under its own prompt")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    p.add_argument("--configs", nargs="+", default=list(PAPER_CONFIGS),
                   help="target-only draft-only accept-all random:P sdvg:TAU sdvg-mean:TAU stride:k=K (StrideAR: the "
                        "target makes every K-th block, no scorer) (default: the paper's)")
    p.add_argument("--metrics", nargs="+", default=["imagereward"],
                   help="visionreward:FOLDER (the paper's metric, column vr), imagereward, clip:FOLDER, "
                        "py:MODULE[:ARG] (local files only)")
    p.add_argument("--vr-checklist", help="local checkout of THUDM/VisionReward (its VisionReward_Video/ questions "
                                          "and weights; read in place)")
    p.add_argument("--vr-mode", choices=VR_MODES, default="prefix",
                   help="prefix: video once, questions batched (default); single: one forward per question; "
                        "generate: the reference's generate per question")
    p.add_argument("--vr-batch", type=int, default=0, help="questions per batched forward (0: all; lower saves memory)")
    p.add_argument("--vr-video", choices=VR_VIDEO, default="mp4",
                   help="mp4: sample from the video as written to mp4 and read back (what the reference reads); "
                        "frames: from the generated frames directly")
    p.add_argument("--tiny", action="store_true", help="the embedded tiny random models (no files)")
    for f, h in (("drafter", "drafter checkpoint"), ("target", "target checkpoint"), ("vae", "Wan 2.1 VAE"),
                 ("reward", "ImageReward.pt"), ("vocab", "bert-base-uncased vocab.txt (default: next to --reward)"),
                 ("umt5", "local umT5 folder: prompts are encoded once and cached")):
        p.add_argument(f"--{f}", help=h)
    add_drafter_kind_args(p, None)  # None: the eval records which kind was asked for (self_forcing when unset)
    p.add_argument("--device", default=None, help="default: cuda when this machine has one or --gpus-per-worker > 0, "
                                                   "else cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="DiT dtype (default bf16 on GPU, fp32 on CPU)")
    p.add_argument("--width", type=int), p.add_argument("--height", type=int), p.add_argument("--blocks", type=int)
    add_recipe_args(p)
    p.add_argument("--decode-rule", choices=["standard", "krea"], default="standard")
    p.add_argument("--route-vae", metavar="FILE", default=None,
                   help="the tiny routing decoder of the @route / @calibrate configs (taew2_1 / lighttaew2_1; "
                        "with --tiny: default the embedded tiny TAEHV). sdvg:-0.7@route scores the drafts on it; "
                        "sdvg:-0.7@calibrate routes on the VAE and scores every draft through both (calibration.json)")
    add_compile_arg(p)
    p.add_argument("--memo-gb", type=float, default=DEFAULT_MEMO_BYTES / GIB, help="per-worker memo for big caches")
    p.add_argument("--out", default="out/eval", help="results folder (rows.csv, run.json, summary.md, pareto.png)")
    p.add_argument("--embed-cache", default=None, help="prompt-embedding cache (default OUT/embeddings; shared "
                                                          "storage on a multi-node cluster)")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray actors (default: one per GPU, else one per CPU); 0 = this process, no Ray")
    p.add_argument("--ray-address", default=None, help="default: a local Ray for the run; 'auto' or HOST:PORT")
    p.add_argument("--ray-join-timeout", type=float, default=JOIN_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up joining --ray-address after this long, before anything is written (default "
                        f"{JOIN_TIMEOUT_S:g})")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--gpus-per-worker", type=float, default=None,
                   help="GPUs each Ray worker asks for (default 1 when --device is cuda, else 0); > 0 makes cuda "
                        "the default device, so a CPU-only driver can run a GPU cluster")
    p.add_argument("--save-videos", action="store_true", help="write OUT/videos/CONFIG_pID_sSEED.mp4")
    p.add_argument("--fresh-timing", action="store_true",
                   help="a fresh memo per config: measured seconds are fresh-run times (no sweep saving)")
    p.add_argument("--no-report", action="store_true", help="skip summary.md / pareto.png at the end")
    a = p.parse_args(argv)
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() or (a.gpus_per_worker or 0) > 0 else "cpu"
    return a


def metric_options(a: argparse.Namespace) -> MetricOptions:
    return MetricOptions(vr_checklist=a.vr_checklist, vr_mode=a.vr_mode, vr_batch=a.vr_batch, vr_video=a.vr_video)


def ray_address(a: argparse.Namespace) -> str | None:
    """The cluster to join: --ray-address, else the RAY_ADDRESS environment variable (as `ray.init()` reads it)."""
    return a.ray_address or os.environ.get("RAY_ADDRESS") or None


def preflight(a: argparse.Namespace) -> list[str]:
    """Every problem with flags and files, found before anything loads."""
    problems = _prompt_problems(a)
    try:
        cfgs = parse_configs(a.configs)
    except ValueError as e:
        problems.append(str(e))
        cfgs = []
    problems += [m for s in a.metrics for m in metric_spec_problems(s, metric_options(a))]
    if a.vr_batch < 0:
        problems.append("--vr-batch must be >= 0")
    problems += filter(None, [compile_problem(a.compile)])
    names = [metric_name(s) for s in a.metrics]
    if len(set(names)) != len(names):
        problems.append(f"--metrics: two metrics write the same column ({names})")
    for name, v in (("--width", a.width), ("--height", a.height)):
        if v is not None and (v < 1 or v % SIZE_MULTIPLE):
            problems.append(f"{name} {v} must be a positive multiple of {SIZE_MULTIPLE}")
    problems += filter(None, [blocks_problem(a.blocks, minimum=2), output_folder_problem(a.out)])
    if a.embed_cache:
        problems += filter(None, [output_folder_problem(a.embed_cache, "--embed-cache")])
    if not a.ray_join_timeout > 0:
        problems.append(f"--ray-join-timeout {a.ray_join_timeout} must be > 0 seconds")
    if a.limit is not None and a.limit < 1:
        problems.append("--limit must be >= 1")
    if a.workers is not None and a.workers < 0:
        problems.append("--workers must be >= 0")
    if a.gpus_per_worker is not None and a.gpus_per_worker < 0:
        problems.append("--gpus-per-worker must be >= 0")
    if a.cpus_per_worker <= 0:
        problems.append("--cpus-per-worker must be > 0")
    if not a.tiny:
        needs_d = any(c.needs_drafter for c in cfgs)
        needs_r = any(c.needs_scorer for c in cfgs) or "imagereward" in a.metrics
        for flag, need in (("target", True), ("vae", True), ("drafter", needs_d), ("reward", needs_r),
                           ("drafter_lora", False)):
            v = getattr(a, flag)
            if need and not v:
                problems.append(f"--{flag} is missing (or give --tiny for the embedded tiny models)")
            elif v and not Path(v).is_file():
                problems.append(f"--{flag.replace('_', '-')} {v}: file not found")
        if a.drafter:
            problems += [f"--drafter: {m}" for m in drafter_problems(a.drafter, a.drafter_kind, a.drafter_lora)]
        if not a.umt5 and not _all_entries_have_embeddings(a):
            problems.append("--umt5 is missing (a local umT5 folder: each prompt is encoded once and cached)")
    problems += _drafter_flag_problems(a)
    problems += _route_problems(a, cfgs)
    problems += recipe_problems(a, real=not a.tiny)
    problems += _umt5_width_problems(a)
    if a.workers != 0 and importlib.util.find_spec("ray") is None:
        problems.append("Ray is not installed: pip install -r requirements-eval.txt, or run with --workers 0")
    return problems


def _route_problems(a: argparse.Namespace, cfgs: list) -> list[str]:
    """A tiny routing decoder where a config routes on it (@route, @calibrate), and its file."""
    routed = [c.name for c in cfgs if c.router]
    if routed and not a.route_vae and not a.tiny:
        return [f"--route-vae FILE is missing: {', '.join(routed)} score drafts on a tiny decoder (taew2_1 / "
                f"lighttaew2_1)"]
    if a.route_vae and a.route_vae != "tiny" and not Path(a.route_vae).is_file():
        return [f"--route-vae {a.route_vae}: file not found"]
    if a.route_vae == "tiny" and not a.tiny:
        return ["--route-vae tiny names the embedded tiny decoder: only with --tiny"]
    return []


def _prompt_problems(a: argparse.Namespace) -> list[str]:
    """The prompt source: a prompt file, or one prompt schedule for the whole sweep (never both)."""
    if a.prompts and a.prompt_schedule:
        return ["--prompts with --prompt-schedule: give one; a schedule sweep runs the schedule file as its only "
                "prompt (a schedule per prompt line is not supported)"]
    if not a.prompts and not a.prompt_schedule:
        return ["--prompts FILE (one prompt per line) or --prompt-schedule FILE is missing"]
    if a.prompts:
        if not Path(a.prompts).is_file():
            return [f"--prompts {a.prompts}: file not found"]
        try:
            prompts = read_prompts(a.prompts)
        except PromptRowError as e:
            return [f"--prompts {a.prompts}: {e}"]
        if not prompts:
            return [f"--prompts {a.prompts}: no prompts in it (empty, or blank lines only; one prompt per line)"]
        return _pixel_row_problems(a, prompts)
    problems = ["--limit applies to --prompts (a prompt schedule is one prompt)"] if a.limit is not None else []
    try:
        entries = read_schedule(a.prompt_schedule)
    except ScheduleError as e:
        return problems + [f"--prompt-schedule: {e}"]
    blocks = a.blocks or (TINY_BLOCKS if a.tiny else REAL_BLOCKS)
    late = [b for b, _ in entries if b >= blocks]
    if late:
        problems.append(f"--prompt-schedule: entries start at block {late} but the videos have {blocks} blocks "
                        f"(0..{blocks - 1}; --blocks sets it)")
    widths = {}
    for b, src in entries:
        if src.embeddings is None:
            continue
        try:
            widths[b] = load_embeddings(src.embeddings)[1].shape[-1]  # a few MB: known before the models load
        except (CheckpointError, OSError) as err:
            problems.append(f"--prompt-schedule (block {b}): {err}")
    text_dim, models = _target_width(a)
    if text_dim is not None and any(w != text_dim for w in widths.values()):
        problems.append(f"--prompt-schedule: embeddings of width {sorted(set(widths.values()))} but {models} "
                        f"take {text_dim}")
    elif len(set(widths.values())) > 1:
        problems.append(f"--prompt-schedule: entries' embeddings differ in width ({widths}, by first block)")
    return problems


def _pixel_row_problems(a: argparse.Namespace, prompts: list[Prompt]) -> list[str]:
    """The given pixels prompt rows name, checked as the demo checks its flags (demo/pixel_args.py: the core's rules)
    at the sweep's size, length and recipes: every problem, each naming its line; notes (a picture's transparency...)
    are printed once."""
    width, height = TINY_SIZE if a.tiny else REAL_SIZE
    run_hw = (a.height or height, a.width or width)
    recipes = role_recipes(a)
    blocks = a.blocks if a.blocks and not blocks_problem(a.blocks) else (TINY_BLOCKS if a.tiny else REAL_BLOCKS)
    problems = []
    for p in prompts:
        if p.pixels is not None:
            checked = check_request(p.pixels, f"--prompts {a.prompts} line {p.id + 1}", run_hw, recipes, blocks)
            problems += checked.problems
            for note in checked.notes:
                print(f"note: line {p.id + 1}: {note}", file=sys.stderr)
    return problems


def _target_width(a: argparse.Namespace) -> tuple[int | None, str]:
    """(prompt-embedding width, which model) the sweep's target takes: the tiny preset's, or the target file's, read
    from its header without loading it (None: the header does not tell; the engine checks when the first row starts)."""
    if a.tiny:
        return PRESETS["tiny-target"].text_dim, "the tiny models"
    if a.target and Path(a.target).is_file():
        return text_width(a.target), f"the target {a.target}"
    return None, "the target"


def _umt5_width_problems(a: argparse.Namespace) -> list[str]:
    """A local umT5 whose embeddings (its config's hidden size) are not as wide as the target takes."""
    if a.tiny or not a.umt5 or _all_entries_have_embeddings(a):
        return []
    try:
        made = umt5_width(umt5_folders(a.umt5)[0])
    except CheckpointError:
        return []  # a folder that is not a umT5 folder: the encoder names it when it loads (prompts not yet cached)
    takes, model = _target_width(a)
    if made is None or takes is None or made == takes:
        return []
    return [f"--umt5 {a.umt5} makes {made}-wide prompt embeddings but {model} takes {takes}-wide ones: give the "
            f"umT5 this target was trained with (umT5-XXL for Wan 2.1)"]


def _all_entries_have_embeddings(a: argparse.Namespace) -> bool:
    """A schedule whose every entry names its embeddings file needs no umT5."""
    if not a.prompt_schedule:
        return False
    try:
        return all(src.embeddings is not None for _, src in read_schedule(a.prompt_schedule))
    except ScheduleError:
        return True  # reported by _prompt_problems


def _drafter_flag_problems(a: argparse.Namespace) -> list[str]:
    """Flags that describe a drafter file, given where no drafter file is read; a LoRA alpha that is no scale."""
    given = [f for f, v in (("--drafter-kind", a.drafter_kind), ("--drafter-lora", a.drafter_lora),
                            ("--drafter-lora-alpha", a.drafter_lora_alpha), ("--pt-entry", a.pt_entry))
             if v is not None]
    problems = []
    if given and (a.tiny or not a.drafter):
        where = "with --tiny (its drafter is built in, not read from a file)" if a.tiny else "without --drafter"
        problems.append(f"{', '.join(given)} given {where}: they describe the drafter file")
    if a.drafter_lora_alpha is not None and not (math.isfinite(a.drafter_lora_alpha) and a.drafter_lora_alpha > 0):
        problems.append(f"--drafter-lora-alpha {a.drafter_lora_alpha} must be a positive number")
    return problems


def role_recipes(a: argparse.Namespace) -> tuple[str, str]:
    """(drafter recipe, target recipe) by name: the run's engine config (EngineConfig.for_run: --drafter-recipe /
    --target-recipe, else --recipe; a drafter file whose kind has its own long-video recipe, LongLive, runs it)."""
    kind = a.drafter_kind if not a.tiny and a.drafter else None
    config = EngineConfig.for_run(a.recipe, a.drafter_recipe, a.target_recipe, kind)
    return recipe_spec(config.recipe_for("drafter")), recipe_spec(config.recipe_for("target"))


def sweep_units(a: argparse.Namespace, encoder: Encoder, cache_dir: Path) -> tuple[list[Unit], int]:
    """The sweep's (prompt, seed) units and how many prompts were encoded now. A prompt file gives one unit per
    (line, seed); a schedule one unit per seed, prompt id 0, each entry encoded once (or read from its own file)."""
    if not a.prompt_schedule:
        prompts = read_prompts(a.prompts, a.limit)
        files, encoded = cached_embeddings(cache_dir, encoder, prompts)
        return [Unit(p.id, s, PromptSchedule.one(PromptSource(p.text, files[p.id])), p.pixels) for p in prompts
                for s in a.seeds], encoded
    entries = read_schedule(a.prompt_schedule)
    to_encode = [Prompt(i, src.text) for i, (_, src) in enumerate(entries) if src.embeddings is None]
    files, encoded = cached_embeddings(cache_dir, encoder, to_encode)
    schedule = PromptSchedule.of((b, src if src.embeddings is not None else PromptSource(src.text, files[i]))
                                 for i, (b, src) in enumerate(entries))
    return [Unit(0, s, schedule) for s in a.seeds], encoded


def schedule_identity(path: str) -> dict:
    """What makes rows of a schedule sweep comparable: every entry's first block and text (as the rows'
    prompt_text shows them) and the identity of the embeddings files entries name."""
    from sdvg_core.io.checkpoint import file_identity

    entries = read_schedule(path)
    ident: dict = {"schedule": " | ".join(f"{b}: {src.text}" for b, src in entries)}
    if any(src.embeddings is not None for _, src in entries):
        ident["schedule_embeddings"] = [f"{b}: {file_identity(src.embeddings)}" for b, src in entries
                                        if src.embeddings is not None]
    return ident


def make_encoder(a: argparse.Namespace) -> Encoder:
    """The prompt encoder: the tiny models' stand-in, or umT5 from a local folder (loaded only if a prompt is
    not in the embedding cache yet)."""
    if a.tiny:
        return demo_encoder(PRESETS["tiny-target"].text_dim)
    if not a.umt5:  # preflight allows this only for a schedule whose every entry names its embeddings file
        return Encoder("none: every prompt-schedule entry names its embeddings file", _no_encoder)
    return umt5_encoder(a.umt5, a.device)


def _no_encoder(text: str) -> torch.Tensor:
    raise RuntimeError(f"no umT5 folder was given to encode {text!r}")


def release_memory(device: str) -> None:
    """Collect what the driver dropped (umT5) and hand its cached GPU blocks back before the sweep runs."""
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def unit_keys(a: argparse.Namespace) -> list[tuple[int, int]]:
    """The sweep's (prompt id, seed) units, known without encoding any prompt (a schedule is prompt id 0)."""
    ids = [p.id for p in read_prompts(a.prompts, a.limit)] if not a.prompt_schedule else [0]
    return [(i, s) for i in ids for s in a.seeds]


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    problems = preflight(a)
    if problems:
        print("error: nothing was run:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return USAGE_ERROR
    configs = parse_configs(a.configs)
    size, blocks = (TINY_SIZE, TINY_BLOCKS) if a.tiny else (REAL_SIZE, REAL_BLOCKS)
    gpu = a.device != "cpu"
    drafter_recipe, target_recipe = role_recipes(a)
    setup = ModelSetup(tiny=a.tiny, drafter=a.drafter, target=a.target, vae=a.vae, reward=a.reward, vocab=a.vocab,
                       pt_entry=a.pt_entry, drafter_kind=a.drafter_kind, drafter_lora=a.drafter_lora,
                       drafter_lora_alpha=a.drafter_lora_alpha, device=a.device,
                       dtype=a.dtype or ("bf16" if gpu else "fp32"),
                       width=a.width or size[0], height=a.height or size[1], blocks=a.blocks or blocks,
                       recipe=a.recipe, drafter_recipe=drafter_recipe, target_recipe=target_recipe,
                       decode_rule=a.decode_rule, memo_bytes=int(a.memo_gb * GIB), compile=a.compile,
                       route_vae=a.route_vae or ("tiny" if a.tiny and any(c.router for c in configs) else None),
                       threads=max(1, int(a.cpus_per_worker)),
                       needs_drafter=any(c.needs_drafter for c in configs),
                       needs_scorer=any(c.needs_scorer for c in configs) or "imagereward" in a.metrics)
    out = Path(a.out)
    encoder = make_encoder(a)
    metric_cols = [metric_name(s) for s in a.metrics]
    header = columns(metric_cols, block_columns(setup.blocks), route=setup.route_vae is not None)
    opts = metric_options(a)
    # --fresh-timing changes what time_s means: rows of the two timings are never mixed in one folder
    timing = "fresh: own memo per config, warmed-up worker" if a.fresh_timing else "shared memo per (prompt, seed)"
    ident = {**setup.identity(), **code_version(), "encoder": encoder.key,
             "metrics": [metric_identity(s, opts) for s in a.metrics], "timing": timing}
    if a.prompt_schedule:  # rows of another schedule (texts, first blocks, embeddings files) are refused
        ident.update(schedule_identity(a.prompt_schedule))
    rows_path, _ = results_paths(out)
    try:
        check_results(out, ident, header)  # reads only
    except RunMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    done = {(r["config"], int(r["prompt"]), int(r["seed"])) for r in read_rows(rows_path)}
    pending = any((c.name, p, s) not in done for p, s in unit_keys(a) for c in configs)
    address = ray_address(a) if a.workers != 0 and pending else None
    if address:  # join before anything is written: a cluster that is not there leaves no folder behind
        set_mode = auth_mode_for_join()
        warn_if_imported_early(set_mode)
        try:
            join(address, ray_env(), a.ray_join_timeout)
        except RayJoinError as e:
            print(f"error: nothing was run or written: {e}", file=sys.stderr)
            return USAGE_ERROR
        print(f"joined the Ray cluster at {address}" + (" (RAY_AUTH_MODE=token: a token was found)" if set_mode
                                                        else ""), file=sys.stderr)
    count = {"n": 0}
    appender = None
    with stop_signals_raise():  # Ctrl-C or SIGTERM: the finished rows stay, the same command resumes
        try:
            run_fp = open_results(out, ident, header)
            t0 = time.perf_counter()
            units, encoded = sweep_units(a, encoder, a.embed_cache or out / "embeddings")
            encoder = None  # umT5 is not needed again: free it before the models of the sweep load
            release_memory(a.device)
            jobs = plan(units, configs, done)
            todo = sum(len(j.configs) for j in jobs)
            print(f"{len(units)} unit(s) x {len(configs)} config(s): {len(units) * len(configs) - todo} row(s) "
                  f"already in {rows_path}, {todo} to run; {encoded} prompt(s) encoded now", file=sys.stderr)
            appender = Appender(rows_path, header)

            def on_row(row: dict) -> None:
                count["n"] += 1
                print(f"[{count['n']}/{todo}] {row['config']} prompt {row['prompt']} seed {row['seed']}: "
                      f"{row['time_s']:.2f} s, acceptance {row['acceptance']}", file=sys.stderr, flush=True)

            ra = RunnerArgs(setup, list(a.metrics), out, a.save_videos, run_fp, not a.fresh_timing, opts)
            if a.workers == 0 or not jobs:
                res = run_local(jobs, ra, appender, on_row)
            else:
                res = _run_on_ray(a, address, jobs, ra, appender, on_row)
        except RayJoinError as e:
            print(f"error: nothing was run: {e}", file=sys.stderr)
            return USAGE_ERROR
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (cli_args.Terminated): 130 / 143
            what, code = stopped_by(e)
            print(f"\n{what}: {count['n']} row(s) written by this run, {len(read_rows(rows_path))} in "
                  f"{rows_path} in all; re-run the same command to resume (finished rows are skipped)", file=sys.stderr)
            return code
        finally:
            if appender is not None:
                appender.close()
            _shutdown_ray()
    print(f"ran {res.rows} row(s) in {time.perf_counter() - t0:.1f} s"
          + (f"; {res.worker_deaths} worker death(s)" if res.worker_deaths else ""), file=sys.stderr)
    if not a.no_report:
        from .report import write_report

        summary, plot = write_report(out)
        print(summary.read_text())
        print(f"wrote {summary} and {plot}\nnote: {IMAGEREWARD_NOTE}" if "imagereward" in a.metrics
              else f"wrote {summary} and {plot}")
    if res.failed:
        print(f"{len(res.failed)} row(s) failed (re-run the same command to retry them):\n  "
              + "\n  ".join(res.failed), file=sys.stderr)
        return 1
    return 0


def ray_env() -> dict:
    """Ray's runtime_env for the workers: local workers import this checkout; cluster nodes need the pack installed
    at the same path."""
    return {"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}}


def _shutdown_ray() -> None:
    """Leave the cluster (or stop the local Ray) if this run started one."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def _run_on_ray(a, address: str | None, jobs, ra: RunnerArgs, appender, on_row):
    """Run the jobs on actors of the joined cluster (`address`), or of a local Ray started for the run."""
    gpw = a.gpus_per_worker if a.gpus_per_worker is not None else (1.0 if a.device != "cpu" else 0.0)
    if address:
        workers = cluster_workers(address, a.workers, a.cpus_per_worker, gpw)
    else:
        workers = start_local(a.workers, a.cpus_per_worker, gpw, ray_env())
    print(f"Ray{' at ' + address if address else ''}: {workers} worker(s), {a.cpus_per_worker} CPU and {gpw} GPU each",
          file=sys.stderr)
    return run_ray(jobs, ra, appender, workers, a.cpus_per_worker, gpw, on_row)


if __name__ == "__main__":
    raise SystemExit(main())
