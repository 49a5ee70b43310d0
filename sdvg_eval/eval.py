"""Prompt-set sweeps: every config on every (prompt, seed), one CSV row each, then the paper's table and a Pareto plot.

    python -m sdvg_eval --tiny --prompts MovieGenVideoBench.txt --limit 8 --workers 2
    python -m sdvg_eval --prompts MovieGenVideoBench.txt --drafter self_forcing_dmd.pt \
        --target krea-realtime-video-14b.safetensors --vae Wan2.1_VAE.pth --reward ImageReward.pt \
        --umt5 umt5-xxl/ --metrics imagereward clip:clip-vit-large/ --ray-address auto --out out/eval

Rows are appended to OUT/rows.csv as each finishes; re-running the same command skips finished rows. A
(prompt, seed) unit runs all its configs on one worker over one shared memo, so a tau sweep computes the
common prefix once (OUT/summary.md reports forwards computed vs a naive sweep). `--workers 0` runs in this
process without Ray. Exit status 2: a usage or input error (nothing was run); 1: some rows failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

from sdvg_core.demo.cli import REAL_BLOCKS, REAL_SIZE, TINY_BLOCKS, TINY_SIZE, USAGE_ERROR
from sdvg_core.engine.engine import DEFAULT_MEMO_BYTES
from sdvg_core.engine.state import SIZE_MULTIPLE
from sdvg_core.models.wan_config import PRESETS

from .config import DEFAULT_SEEDS, PAPER_CONFIGS, parse_configs
from .metrics import IMAGEREWARD_NOTE, metric_name, metric_spec_problem
from .prompts import cached_embeddings, demo_encoder, read_prompts, umt5_encoder
from .records import Appender, RunMismatch, code_version, columns, open_results, read_rows, results_paths
from .sweep import plan, run_local, run_ray
from .worker import DTYPES, ModelSetup, Unit, block_columns

GIB = 1 << 30


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sdvg_eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", required=True, help="one prompt per line (prompt id k = line k+1)")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    p.add_argument("--configs", nargs="+", default=list(PAPER_CONFIGS),
                   help="target-only draft-only accept-all random:P sdvg:TAU sdvg-mean:TAU (default: the paper's)")
    p.add_argument("--metrics", nargs="+", default=["imagereward"],
                   help="imagereward, clip:FOLDER, visionreward:FOLDER, py:MODULE[:ARG] (local files only)")
    p.add_argument("--tiny", action="store_true", help="the embedded tiny random models (no files)")
    for f, h in (("drafter", "drafter checkpoint"), ("target", "target checkpoint"), ("vae", "Wan 2.1 VAE"),
                 ("reward", "ImageReward.pt"), ("vocab", "bert-base-uncased vocab.txt (default: next to --reward)"),
                 ("umt5", "local umT5 folder: prompts are encoded once and cached")):
        p.add_argument(f"--{f}", help=h)
    p.add_argument("--pt-entry", choices=["generator_ema", "generator"], default="generator_ema")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="DiT dtype (default bf16 on GPU, fp32 on CPU)")
    p.add_argument("--width", type=int), p.add_argument("--height", type=int), p.add_argument("--blocks", type=int)
    p.add_argument("--recipe", choices=["krea", "self_forcing"], default="krea")
    p.add_argument("--decode-rule", choices=["standard", "krea"], default="standard")
    p.add_argument("--memo-gb", type=float, default=DEFAULT_MEMO_BYTES / GIB, help="per-worker memo for big caches")
    p.add_argument("--out", default="out/eval", help="results folder (rows.csv, run.json, summary.md, pareto.png)")
    p.add_argument("--embed-cache", default=None, help="prompt-embedding cache (default OUT/embeddings; shared "
                                                          "storage on a multi-node cluster)")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray actors (default: one per GPU, else one per CPU); 0 = this process, no Ray")
    p.add_argument("--ray-address", default=None, help="default: a local Ray for the run; 'auto' or HOST:PORT")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--gpus-per-worker", type=float, default=None, help="default 1 on a GPU device, else 0")
    p.add_argument("--save-videos", action="store_true", help="write OUT/videos/CONFIG_pID_sSEED.mp4")
    p.add_argument("--fresh-timing", action="store_true",
                   help="a fresh memo per config: measured seconds are fresh-run times (no sweep saving)")
    p.add_argument("--no-report", action="store_true", help="skip summary.md / pareto.png at the end")
    return p.parse_args(argv)


def preflight(a: argparse.Namespace) -> list[str]:
    """Every problem with flags and files, found before anything loads."""
    problems = []
    if not Path(a.prompts).is_file():
        problems.append(f"--prompts {a.prompts}: file not found")
    try:
        cfgs = parse_configs(a.configs)
    except ValueError as e:
        problems.append(str(e))
        cfgs = []
    problems += [m for s in a.metrics if (m := metric_spec_problem(s))]
    names = [metric_name(s) for s in a.metrics]
    if len(set(names)) != len(names):
        problems.append(f"--metrics: two metrics write the same column ({names})")
    for name, v in (("--width", a.width), ("--height", a.height)):
        if v is not None and (v < 1 or v % SIZE_MULTIPLE):
            problems.append(f"{name} {v} must be a positive multiple of {SIZE_MULTIPLE}")
    if a.blocks is not None and a.blocks < 2:
        problems.append(f"--blocks {a.blocks} must be >= 2 (block 0 always comes from the target)")
    if a.limit is not None and a.limit < 1:
        problems.append("--limit must be >= 1")
    if a.workers is not None and a.workers < 0:
        problems.append("--workers must be >= 0")
    if not a.tiny:
        needs_d = any(c.needs_drafter for c in cfgs)
        needs_r = any(c.needs_scorer for c in cfgs) or "imagereward" in a.metrics
        for flag, need in (("target", True), ("vae", True), ("drafter", needs_d), ("reward", needs_r)):
            v = getattr(a, flag)
            if need and not v:
                problems.append(f"--{flag} is missing (or give --tiny for the embedded tiny models)")
            elif v and not Path(v).is_file():
                problems.append(f"--{flag} {v}: file not found")
        if not a.umt5:
            problems.append("--umt5 is missing (a local umT5 folder: each prompt is encoded once and cached)")
    if a.workers != 0 and importlib.util.find_spec("ray") is None:
        problems.append("Ray is not installed: pip install -r requirements-eval.txt, or run with --workers 0")
    return problems


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
    setup = ModelSetup(tiny=a.tiny, drafter=a.drafter, target=a.target, vae=a.vae, reward=a.reward, vocab=a.vocab,
                       pt_entry=a.pt_entry, device=a.device, dtype=a.dtype or ("bf16" if gpu else "fp32"),
                       width=a.width or size[0], height=a.height or size[1], blocks=a.blocks or blocks,
                       recipe=a.recipe, decode_rule=a.decode_rule, memo_bytes=int(a.memo_gb * GIB),
                       threads=max(1, int(a.cpus_per_worker)),
                       needs_drafter=any(c.needs_drafter for c in configs),
                       needs_scorer=any(c.needs_scorer for c in configs) or "imagereward" in a.metrics)
    out = Path(a.out)
    prompts = read_prompts(a.prompts, a.limit)
    encoder = demo_encoder(PRESETS["tiny-target"].text_dim) if a.tiny else umt5_encoder(a.umt5, a.device)
    metric_cols = [metric_name(s) for s in a.metrics]
    header = columns(metric_cols, block_columns(setup.blocks))
    ident = {**setup.identity(), **code_version(), "encoder": encoder.key, "metrics": list(a.metrics)}
    try:
        run_fp = open_results(out, ident, header)
    except RunMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    rows_path, _ = results_paths(out)
    done = {(r["config"], int(r["prompt_id"]), int(r["seed"])) for r in read_rows(rows_path)}
    t0 = time.perf_counter()
    files, encoded = cached_embeddings(a.embed_cache or out / "embeddings", encoder, prompts)
    units = [Unit(p.id, p.text, s, str(files[p.id])) for p in prompts for s in a.seeds]
    jobs = plan(units, configs, done)
    todo = sum(len(j.configs) for j in jobs)
    print(f"{len(units)} unit(s) x {len(configs)} config(s): {len(units) * len(configs) - todo} row(s) already in "
          f"{rows_path}, {todo} to run; {encoded} prompt(s) encoded now", file=sys.stderr)
    appender = Appender(rows_path, header)
    count = {"n": 0}

    def on_row(row: dict) -> None:
        count["n"] += 1
        print(f"[{count['n']}/{todo}] {row['config']} prompt {row['prompt_id']} seed {row['seed']}: "
              f"{row['time_s']:.2f} s, acceptance {row['acceptance']}", file=sys.stderr, flush=True)

    try:
        if a.workers == 0 or not jobs:
            res = run_local(jobs, setup, a.metrics, out, appender, a.save_videos, run_fp, on_row,
                            not a.fresh_timing)
        else:
            res = _run_on_ray(a, jobs, setup, out, appender, run_fp, gpu, on_row)
    finally:
        appender.close()
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


def _run_on_ray(a, jobs, setup, out, appender, run_fp, gpu, on_row):
    """Start a local Ray (or join `--ray-address`), run the jobs on actors, shut Ray down again."""
    import os

    import ray

    root = str(Path(__file__).resolve().parents[1])
    gpw = a.gpus_per_worker if a.gpus_per_worker is not None else (1.0 if gpu else 0.0)
    env = {"env_vars": {"PYTHONPATH": root}}  # local workers import this checkout; cluster nodes need the pack installed
    if a.ray_address:
        ray.init(address=a.ray_address, runtime_env=env, log_to_driver=False)
        res = ray.cluster_resources()  # default: one actor per GPU of the cluster (per CPU slot without GPUs)
        workers = a.workers or max(1, int(res.get("GPU", 0) // gpw) if gpw else int(res.get("CPU", 1) // a.cpus_per_worker))
    else:
        slots = torch.cuda.device_count() if gpu else int((os.cpu_count() or 1) // a.cpus_per_worker)
        workers = a.workers or max(1, slots)
        ray.init(num_cpus=max(1, round(workers * a.cpus_per_worker)), num_gpus=round(workers * gpw), runtime_env=env,
                 include_dashboard=False, log_to_driver=False)
    print(f"Ray: {workers} worker(s), {a.cpus_per_worker} CPU and {gpw} GPU each", file=sys.stderr)
    try:
        return run_ray(jobs, setup, a.metrics, out, appender, a.save_videos, run_fp, workers, a.cpus_per_worker,
                       gpw, on_row, not a.fresh_timing)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
