"""Scale benchmark: the real architectures with random weights, fixed decision patterns, interleaved rounds.

    ./dev.sh bench --size {tiny,mid,full} [--device cuda] [--rounds 3] [--configs all|sdvg,target-only,...]
                   [--blocks 9] [--recipe krea | --drafter-recipe R --target-recipe R] [--memo-gb G]
                   [--json PATH] [--md PATH] [--compile [BACKEND]]

Sizes (weights are always seeded random init at these shapes, never read from files; bench/scale_models.py):
- full: Wan 2.1 T2V 1.3B drafter + 14B target, the real Wan 2.1 VAE and real-size ImageReward, 832x480,
  bf16 on CUDA (fp32 on CPU). Needs a GPU with room for both DiTs (14B bf16 = 28.6 GB) plus the KV windows.
- mid: the real layer widths with one DiT layer each, two ImageReward layers per tower, 128x64: the 14B:1.3B
  forward cost ratio is kept, but one DiT layer against the real VAE makes decoding most of a block. So its
  shares of DiT, decode and scoring are far from full size; the output adds the full-size projection (each unit's
  measured cost scaled by its FLOPs at full size / at this size, FLOPs counted on meta-device models), labelled.
- tiny: the demo's tiny models (CI smoke test); same JSON keys.

Configurations (`--configs`, ids): target-only; reference (the reference algorithm, lazy=False, at 6 of 8
accepted); sdvg (this engine at the same 6 of 8); all-accept; all-reject; stride:k=2 (the StrideAR baseline: the target
makes every 2nd block, no scorer; `stride:k=K` for another K); sdvg-taehv (sdvg's 6 of 8 with the drafts scored on a
tiny routing decoder, TAEHV at taew2_1's widths with random weights; the video still decoded by the VAE). Each row
names its routing decoder (`route_decoder`) and its routing cost per drafted block (`route_overhead_per_block`:
one block's decode by that decoder + scoring its frames, priced with the unit costs); the JSON's
`route_overhead_per_block` has it for every decoder the runs used, and the projection at full size. With --compile,
`compile`: the graphs torch.compile made and its graph breaks, per recipe and role (warm-up included; per row: the
row's fastest run). After one untimed warm-up generation,
`--rounds` interleaved rounds run every configuration once each, the order rotated by one per round; min and
median wall time are reported. On the CPU each run is a forked child of the process that built the models (its
peak RSS is that run's alone: `ru_maxrss` of the child); on CUDA `torch.cuda.max_memory_allocated` per run and
per block, beside the resident weights and the memory estimate (sdvg_core/engine/memory.py).

"predicted" is independent of the runs: each round ends with micro-benchmarks of every kind of call the runs made
(one drafter / target denoising forward, one context forward, one text encode, one decoded latent frame, one
anchor encode, one scored frame; bench/units.py), and a configuration's prediction is its recorded calls x those
unit costs. Per block: wall seconds (`per_block_seconds`), the engine's BlockRecord seconds / work / cost, the
predicted seconds and memory (RSS on the CPU, device peak on CUDA).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compile_counters import CompileCounter, add as add_counts, by_recipe  # noqa: E402
from scale_models import SCALES, Models, Scale, build_meta, build_models, run_dtypes, weight_bytes  # noqa: E402
from units import (  # noqa: E402
    DIT_KINDS, CallClass, CallLog, Geometry, UnitBench, class_flops, price, shares, units_by_block,
)

from sdvg_core.demo.tiny import DEMO_PROMPT  # noqa: E402
from sdvg_core.engine.config import DEFAULT_MEMO_BYTES, EngineConfig  # noqa: E402
from sdvg_core.engine.engine import Callbacks, Engine  # noqa: E402
from sdvg_core.engine.heap import HeapTrimmer  # noqa: E402
from sdvg_core.engine.memory import GIB, estimate_for_spec  # noqa: E402
from sdvg_core.engine.policy import DEFAULT_STRIDE_K, FixedPattern  # noqa: E402
from sdvg_core.engine.policy_names import parse_policy, policy_by_name  # noqa: E402
from sdvg_core.engine.recipes import RECIPE_NAMES, recipe_arg, recipe_by_name  # noqa: E402
from sdvg_core.engine.report import compiled_line, compiled_models  # noqa: E402
from sdvg_core.engine.route_decoder import WAN_VAE, decoder_name  # noqa: E402
from sdvg_core.engine.state import GenerationSpec, PromptConditioning  # noqa: E402
from sdvg_core.demo.cli_args import add_compile_arg  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402
from sdvg_core.models.vae import VAE_PRESETS  # noqa: E402

BLOCKS = 9  # the paper's 9 blocks
# The reference's ~73% acceptance over blocks 1..8 as 6 of 8 (block 0 always comes from the target); longer runs
# repeat the 8-block pattern.
PATTERN_6_OF_8 = (False, True, True, False, True, True, True, False, True)
PHASES = ("context", "draft", "decode", "score", "target", "route_decode")
WORK = ("drafter_forwards", "target_forwards", "drafter_context_forwards", "target_context_forwards",
        "vae_decode_frames", "vae_encodes", "scored_frames", "route_decode_frames")
DEFAULT_ROUNDS = 3  # interleaved rounds: a shared machine's drift hits every configuration alike
WARMUP_PATTERN = (False, True, False)  # 3 blocks: target, drafter, target (block 2 needs Krea's anchor)
TREND_FROM_BLOCK = 50  # per-block slope fitted from this block on (issue 15 item 7: blocks 50-300)
TREND_WINDOW = 50  # blocks per window of the per-block medians beside the slope


def pattern(blocks: int, accept: tuple[bool, ...] = PATTERN_6_OF_8) -> tuple[bool, ...]:
    """Block 0 forced (never accepted), then accept[1:] repeated over blocks 1..blocks-1."""
    cycle = accept[1:]
    return (False,) + tuple(cycle[i % len(cycle)] for i in range(blocks - 1))


@dataclass(frozen=True)
class Config:
    """One benchmark configuration: a decision pattern and whether the engine is lazy."""

    id: str
    name: str
    lazy: bool
    policy: Callable[[int], Any]  # blocks -> Policy
    route: bool = False  # the drafts scored on the tiny routing decoder (Models.route_vae), not the VAE


CONFIGS: dict[str, Config] = {c.id: c for c in (
    Config("target-only", "target-only", True, lambda n: policy_by_name("target-only")),
    Config("reference", "reference algorithm (lazy=False), 6/8", False, lambda n: FixedPattern(pattern(n))),
    Config("sdvg", "this engine, 6/8", True, lambda n: FixedPattern(pattern(n))),
    Config("all-accept", "all-accept", True, lambda n: FixedPattern((False,) + (True,) * (n - 1))),
    Config("all-reject", "all-reject", True, lambda n: FixedPattern((False,) * n)),
)}
ROUTE_CONFIG = Config("sdvg-taehv", "this engine, 6/8, drafts scored on TAEHV", True, lambda n: FixedPattern(pattern(n)),
                      route=True)
# StrideAR (SpecAR) as a baseline, named in the policy grammar: `stride:k=K` runs StridePolicy(K) (the target makes
# blocks 0, K, 2K, ..., no scorer); `all` runs k=2 (DEFAULT_STRIDE_K, the k of its published comparison with SDVG).


def stride_config(name: str) -> Config | None:
    """The configuration of a `stride:k=K` policy name (engine/policy_names), else None."""
    try:
        spec = parse_policy(name)
    except ValueError:
        return None
    if spec.kind != "stride":
        return None
    k = spec.value
    return Config(spec.name, f"StrideAR k={k} (target: blocks 0, {k}, {2 * k}, ...; no scorer)", True,
                  lambda n: spec.policy())


CONFIGS[f"stride:k={DEFAULT_STRIDE_K}"] = stride_config(f"stride:k={DEFAULT_STRIDE_K}")
CONFIGS[ROUTE_CONFIG.id] = ROUTE_CONFIG


# ----------------------------------------------------------------------------------------------- memory probes
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """Resident set size of this process now (Linux /proc), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return None


def rss_peak_bytes(reset: bool = False) -> int | None:
    """This process's RSS high-water mark (VmHWM); with reset, start a new one at the current RSS afterwards
    (Linux clear_refs 5; where that is not allowed the mark keeps the process's whole-life peak)."""
    try:
        with open("/proc/self/status") as f:
            peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return None
    if reset:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
    return peak


# ----------------------------------------------------------------------------------------------- the setup
@dataclass
class Setup:
    """Everything a run needs: models, the generation, the engine settings."""

    size: str
    scale: Scale
    device: torch.device
    models: Models
    spec: GenerationSpec
    drafter_recipe: Any
    target_recipe: Any
    memo_bytes: int
    geometry: Geometry
    compile: bool | str = False  # the DiTs are compiled: count torch.compile's graphs and breaks per role

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def engine_config(s: Setup, lazy: bool) -> EngineConfig:
    """The engine settings of a run: each role's recipe, the memo budget, per-phase CUDA sync on CUDA."""
    return EngineConfig.for_run(s.target_recipe, s.drafter_recipe, s.target_recipe, memo_bytes=s.memo_bytes,
                                lazy=lazy, sync_timing=s.cuda)


def run_config(s: Setup, cfg: Config, blocks: int | None = None) -> dict:
    """One generation on a fresh engine (its own empty memo): every model call and every block recorded."""
    blocks = blocks or s.spec.num_blocks
    spec = replace(s.spec, num_blocks=blocks)
    engine = Engine(s.models.target, s.models.vae, s.models.drafter, s.models.scorer, engine_config(s, cfg.lazy),
                    route_vae=s.models.route_vae if cfg.route else None)
    log = CallLog(s.cuda).attach(s.models)
    counter = CompileCounter({"drafter": s.models.drafter, "target": s.models.target}) if s.compile else None
    per_block: list[dict] = []
    marks: list[float] = []
    cpu_marks: list[float] = []  # process CPU seconds: what a block cost even when other processes share the cores

    def on_progress(ev) -> None:
        if ev.kind != "block":
            return
        if s.cuda:
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
        cpu_marks.append(time.process_time())
        mem = {"rss_bytes": rss_bytes(), "rss_peak_bytes": rss_peak_bytes(reset=True)}
        if s.cuda:
            mem.update(device_peak_bytes=torch.cuda.max_memory_allocated(),
                       device_allocated_bytes=torch.cuda.memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        per_block.append(mem)
        log.block = ev.block + 1

    engine.callbacks = Callbacks(progress=on_progress)
    rss_start = rss_bytes()
    rss_peak_bytes(reset=True)
    device_start = None
    if s.cuda:
        torch.cuda.synchronize()
        device_start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    try:
        if counter is not None:
            counter.__enter__()
        t0, c0 = time.perf_counter(), time.process_time()
        # the command lines' heap policy (sdvg_core/engine/heap.py): RSS follows the memo, not the run's high mark
        trimmer = HeapTrimmer()
        state = engine.generate(spec, cfg.policy(blocks), on_block=lambda eng, st: trimmer.block_done())
        if s.cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        if counter is not None:
            counter.__exit__()
        log.detach()
    starts = [t0] + marks[:-1]
    cpu_starts = [c0] + cpu_marks[:-1]
    rows = []
    for b, rec in enumerate(state.blocks):
        rows.append({"index": b, "decision": rec.decision, "producer": rec.producer, "score": rec.score,
                     "wall_s": marks[b] - starts[b], "cpu_s": cpu_marks[b] - cpu_starts[b], "seconds": dict(rec.seconds), "work": dict(rec.work),
                     "cost": dict(rec.cost), **per_block[b]})
    counts = {k: int(sum(r["work"].get(k, 0) for r in rows)) for k in WORK}
    peaks = [r.get("device_peak_bytes") for r in rows]
    return {"config": cfg.id, "wall": wall, "blocks": rows, "calls": log.calls, "counts": counts,
            "route_decoder": engine.route_decoder, "compile": None if counter is None else counter.counts,
            "phases": {p: sum(float(r["seconds"].get(p, 0.0)) for r in rows) for p in PHASES},
            "model_s": log.seconds(), "rss_start_bytes": rss_start,
            "rss_peak_bytes": max([r["rss_peak_bytes"] or 0 for r in rows] + [rss_start or 0]) or None,
            "device_start_bytes": device_start, "device_peak_bytes": max(peaks) if s.cuda and peaks else None}


def run_forked(fn: Callable[[], dict]) -> dict:
    """Run `fn` in a forked child (the models are shared copy-on-write) and return its result plus the child's
    own peak RSS (`ru_maxrss` from wait4: this run's memory alone, not the parent's history)."""
    with tempfile.NamedTemporaryFile(prefix="sdvg-bench-", suffix=".pkl", delete=False) as f:
        out = Path(f.name)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run, write the result, leave without running the parent's exit handlers
        code = 0
        try:
            payload = ("ok", fn())
        except BaseException:  # noqa: BLE001 (reported by the parent)
            payload, code = ("error", traceback.format_exc()), 1
        try:
            out.write_bytes(pickle.dumps(payload))
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    try:
        kind, value = pickle.loads(out.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError) as e:
        raise RuntimeError(f"benchmark child {pid} died (wait status {status}) without a result") from e
    finally:
        out.unlink(missing_ok=True)
    if kind != "ok":
        raise RuntimeError(f"benchmark child failed:\n{value}")
    value["child_maxrss_bytes"] = usage.ru_maxrss * 1024  # Linux reports KiB
    return value


def choose_isolation(requested: str, device: torch.device) -> str:
    """fork on the CPU when safe (1 thread: a forked child cannot use the parent's OpenMP pool), else in-process."""
    forkable = device.type == "cpu" and hasattr(os, "fork") and torch.get_num_threads() == 1
    if requested == "fork" and not forkable:
        raise SystemExit("--isolation fork needs the CPU device, os.fork and --threads 1 (a forked child hangs "
                         "in OpenMP when the parent used more threads)")
    if requested == "auto":
        return "fork" if forkable else "none"
    return requested


# ----------------------------------------------------------------------------------------------- rounds
@dataclass
class Rounds:
    """The interleaved rounds: runs per configuration, the order of each round, the unit benchmark."""

    runs: dict[str, list[dict]]
    orders: list[list[str]]
    units: UnitBench
    stopped_early: bool


def run_rounds(s: Setup, configs: list[Config], rounds: int, isolation: str, unit_reps: int = 1,
               deadline_s: float = 0.0, log: Callable[[str], None] = print) -> Rounds:
    """`rounds` rounds over `configs`, the order rotated by one each round; each round ends with `unit_reps`
    micro-benchmark repeats of every call class seen so far. With `deadline_s`, no round starts that the
    previous round's duration says would end past it (at least one round always runs)."""
    t_start = time.perf_counter()
    runs: dict[str, list[dict]] = {c.id: [] for c in configs}
    orders: list[list[str]] = []
    units = UnitBench(s.models, s.geometry, sync=s.cuda)
    units.add(route_classes(s))  # every routing decoder's cost per block, whichever configurations run
    last = 0.0
    stopped = False
    for r in range(max(rounds, 1)):
        if r and deadline_s and time.perf_counter() - t_start + last > deadline_s:
            stopped = True
            log(f"  deadline: stopping after {r} round(s)")
            break
        t_round = time.perf_counter()
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        orders.append([c.id for c in order])
        for c in order:
            res = run_forked(lambda c=c: run_config(s, c)) if isolation == "fork" else run_config(s, c)
            runs[c.id].append(res)
            log(f"  round {r + 1} {c.id}: {res['wall']:.2f} s")
        for res in (rr[-1] for rr in runs.values() if rr):
            units.add(cls for _, cls, _, _ in res["calls"])
        units.rep(unit_reps)
        last = time.perf_counter() - t_round
    return Rounds(runs, orders, units, stopped)


# ----------------------------------------------------------------------------------------------- routing cost
def route_classes(s: Setup) -> list[CallClass]:
    """What routing one block costs: a steady-state latent frame decoded by each decoder and a scored frame."""
    return [CallClass("decode"), CallClass("score_frame")] + (
        [CallClass("route_decode")] if s.models.route_vae is not None else [])


def route_overhead(s: Setup, unit_s: dict[CallClass, float]) -> dict[str, dict[str, float]]:
    """Per drafted block, with each routing decoder: its decode of the block's latent frames (steady state: after
    the first block) and ImageReward on the block's pixel frames, priced with the unit costs `unit_s` (seconds per
    unit: this size's measured ones, or the projection's full-size ones)."""
    F = s.spec.frames_per_block
    frames = s.models.vae.config.pixel_frames(F, includes_first=False)
    score = unit_s.get(CallClass("score_frame"))
    decoders = [(WAN_VAE, CallClass("decode"))]
    if s.models.route_vae is not None:
        decoders.append((decoder_name(s.models.route_vae), CallClass("route_decode")))
    out = {}
    for name, cls in decoders:
        if cls in unit_s and score is not None:
            decode = F * unit_s[cls]
            out[name] = {"decode_s": decode, "score_s": frames * score, "total_s": decode + frames * score}
    return out


# ----------------------------------------------------------------------------------------------- summary
def run_units(res: dict) -> Counter:
    c: Counter = Counter()
    for _, cls, n, _ in res["calls"]:
        c[cls] += n
    return c


def trend(ys: list[float], start: int) -> float | None:
    """Least-squares slope of ys[start:] against the block index (None with fewer than 3 points)."""
    pts = list(enumerate(ys))[start:]
    if len(pts) < 3:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def window_medians(blocks: list[dict], start: int, width: int = TREND_WINDOW) -> list[dict]:
    """Median wall and CPU seconds per `width`-block window from `start` on, per decision (accepted and rejected
    blocks do different work): a trend read this way is not pulled by a few blocks slowed by another process."""
    out = []
    for lo in range(start, len(blocks), width):
        win = blocks[lo:lo + width]
        row: dict = {"first_block": lo, "last_block": lo + len(win) - 1}
        for decision in sorted({b["decision"] for b in win}):
            sel = [b for b in win if b["decision"] == decision]
            row[decision] = {"n": len(sel), "wall_s": statistics.median(b["wall_s"] for b in sel),
                             "cpu_s": statistics.median(b["cpu_s"] for b in sel)}
        out.append(row)
    return out


def summarize(s: Setup, configs: list[Config], rr: Rounds) -> tuple[list[dict], dict[CallClass, float]]:
    """One row per configuration (its fastest run in detail, min and median over rounds)."""
    costs = rr.units.costs()
    unit_s = {c: u.min_s for c, u in costs.items()}
    best = {cid: min(runs, key=lambda r: r["wall"]) for cid, runs in rr.runs.items()}
    base_id = "target-only" if "target-only" in best else configs[0].id
    base, base_pred = best[base_id], price(run_units(best[base_id]), unit_s)
    base_median = statistics.median(r["wall"] for r in rr.runs[base_id])
    n = s.spec.num_blocks
    overhead = route_overhead(s, unit_s)
    recipes = {"drafter": s.drafter_recipe.name, "target": s.target_recipe.name}
    rows = []
    for c in configs:
        r = best[c.id]
        walls = [x["wall"] for x in rr.runs[c.id]]
        units = run_units(r)
        pred = price(units, unit_s)
        by_block = units_by_block(r["calls"], len(r["blocks"]))
        blocks = [{**b, "predicted_s": price(u, unit_s)} for b, u in zip(r["blocks"], by_block)]
        per_block_s = [b["wall_s"] for b in blocks]
        start = min(TREND_FROM_BLOCK, len(blocks) // 6)
        mem_key = "device_peak_bytes" if s.cuda else "rss_bytes"
        mem = [b.get(mem_key) for b in blocks]
        rows.append({
            "id": c.id, "name": c.name, "lazy": c.lazy, "rounds": len(walls), "wall_s": walls,
            "wall_s_min": min(walls), "wall_s_median": statistics.median(walls), "s_per_block": min(walls) / n,
            "phase_s_per_block": {k: v / n for k, v in r["phases"].items()},
            "model_s": r["model_s"], "overhead_s": r["wall"] - r["model_s"],
            "overhead_share": (r["wall"] - r["model_s"]) / r["wall"],
            "speedup_measured": base["wall"] / r["wall"],
            "speedup_measured_median": base_median / statistics.median(walls),
            "predicted_s": pred, "speedup_predicted": base_pred / pred if pred else None,
            "memory": {"rss_start_bytes": r["rss_start_bytes"], "rss_peak_bytes": r["rss_peak_bytes"],
                       "child_maxrss_bytes": r.get("child_maxrss_bytes"),
                       "device_start_bytes": r["device_start_bytes"], "device_peak_bytes": r["device_peak_bytes"]},
            "counts": r["counts"], "calls": {cls.label: k for cls, k in sorted(units.items())},
            "route_decoder": r["route_decoder"],
            # a configuration that scores no draft routes on nothing
            "route_overhead_per_block": overhead.get(r["route_decoder"]) if r["counts"]["scored_frames"] else None,
            "compile": None if r["compile"] is None else by_recipe(r["compile"], recipes),
            "decisions": [b["decision"] for b in blocks],
            "per_block_seconds": per_block_s, "per_block": blocks,
            "trend": {"from_block": start, "s_per_block_slope": trend(per_block_s, start),
                      "cpu_s_per_block_slope": trend([b["cpu_s"] for b in blocks], start),
                      "windows": window_medians(blocks, start), "memory_key": mem_key, "memory_first_bytes": mem[start] if mem else None,
                      "memory_last_bytes": mem[-1] if mem else None},
        })
    return rows, unit_s


def memory_estimate(s: Setup, weights: dict[str, int]) -> dict:
    """memory.py's estimate for this spec and the two recipes (one model on the device at a time, as ComfyUI runs
    them), and the bench's own peak estimate: all four models resident (the bench keeps them loaded), the memo's
    budget full, what the generation holds through every phase (memory.py `held`) and the largest phase beside
    its weights. An estimate, not a measurement."""
    dit_dtype, vae_dtype, _ = run_dtypes(s.device)
    est = estimate_for_spec(s.spec, [s.drafter_recipe, s.target_recipe], [(s.scale.drafter, dit_dtype),
                                                                          (s.scale.target, dit_dtype)],
                            VAE_PRESETS[s.scale.vae], vae_dtype, vae_weight_bytes=weights["vae"])
    phase = max([d.phase - d.weights for d in est.dits] + [est.vae_total - est.vae_weights])
    bench_peak = sum(weights.values()) + s.memo_bytes + est.held + phase
    return {"bench_peak_bytes": bench_peak, "weights_bytes": weights, "memo_bytes": s.memo_bytes,
            "held_bytes": est.held, "largest_phase_bytes": phase, "one_model_peak_bytes": est.peak,
            "host_pixels_bytes": est.host_pixels,
            "per_call": {**{d.name: {"weights": d.weights, "kv": d.kv, "text_kv": d.text_kv,
                                     "activations": d.activations, "total": d.total, "kv_held": d.kv_held}
                            for d in est.dits},
                         "vae decode": {"weights": est.vae_weights, "cache": est.vae_cache,
                                        "activations": est.vae_activations, "total": est.vae_total}},
            "describe": est.describe()}


def projection(s: Setup, rows: list[dict], runs_units: dict[str, Counter], unit_s: dict[CallClass, float]) -> dict:
    """Full-size shares and speedups computed from this size's unit costs (a projection, not a measurement).

    FLOPs per call class are counted on meta-device models at this size and at full size (832x480, 30/40 DiT
    layers). Each class's full-size seconds = its FLOPs at full size x this machine's seconds per FLOP for that
    kind of work (the DiTs: the role's costliest denoising forward; the VAE decode, encode and scorer: their own).
    """
    classes = set().union(*runs_units.values()) | {c for c in route_classes(s) if c in unit_s}
    full = SCALES["full"]
    here = class_flops(build_meta(s.scale, s.device.type), s.geometry, classes)
    g_full = replace(s.geometry, width=full.width, height=full.height,
                     embeddings=demo_embeddings(DEMO_PROMPT, full.target.text_dim))
    there = class_flops(build_meta(full, s.device.type), g_full, classes)

    def rate(cls: CallClass) -> float:
        if cls.kind in DIT_KINDS or cls.kind == "text":
            ref = max((c for c in classes if c.kind == "denoise" and c.role == cls.role), key=lambda c: here[c].flops)
        elif cls.kind in ("decode_first", "route_decode_first"):
            steady = CallClass(cls.kind.removesuffix("_first"))
            ref = steady if steady in classes else cls
        else:
            ref = cls
        return unit_s[ref] / here[ref].flops if here[ref].flops else 0.0

    projected = {c: there[c].flops * rate(c) for c in classes}
    flops_full = {c: there[c].flops for c in classes}
    base = runs_units.get("target-only")
    out = {"label": "projection: unit costs measured at this size, scaled by each unit's FLOPs at full size",
           "flops_per_unit": {c.label: {"here": here[c].flops, "full": there[c].flops} for c in sorted(classes)},
           "configs": {}}
    for rid, units in runs_units.items():
        sec = price(units, projected)
        out["configs"][rid] = {
            "projected_full_s_per_block": sec / s.spec.num_blocks,
            "projected_speedup": price(base, projected) / sec if base else None,
            "projected_shares": shares(units, projected),
            "full_size_flop_shares": shares(units, flops_full),
            "shares_here": shares(units, unit_s)}
    # routing one block at full size with each decoder (the tiny decoder at taew2_1's widths there)
    out["route_overhead_per_block"] = route_overhead(s, projected)
    return out


# ----------------------------------------------------------------------------------------------- output
def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    return f"{cpu} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


def _gib(v) -> str:
    return "-" if v is None else f"{v / GIB:.2f}"


def markdown(rows: list[dict], meta: dict) -> str:
    cuda = meta["device"].startswith("cuda")
    peak_head = "device peak GiB" if cuda else "peak RSS GiB"
    lines = [f"SDVG scale benchmark, size `{meta['size']}` ({meta['width']}x{meta['height']}, {meta['blocks']} blocks, "
             f"{meta['dtype']}, recipes drafter `{meta['recipes']['drafter']}` / target `{meta['recipes']['target']}`)"
             f" on {meta['machine']}; {compiled_line(meta['compiled_models'])}; {meta['rounds_run']} interleaved "
             f"round(s), "
             f"isolation `{meta['isolation']}`; "
             f"command: `{meta['command']}`", "",
             "| configuration | D fw | T fw | s/block min | s/block median | context | draft | decode | score | "
             f"target | route decode | {peak_head} | resident GiB | estimate GiB | speedup min | speedup median | "
             "predicted (unit costs) | engine overhead |", "|" + "---|" * 18]
    resident = meta["resident_bytes"]
    est = meta["memory_estimate"]["bench_peak_bytes"]
    for r in rows:
        p = r["phase_s_per_block"]
        m = r["memory"]
        peak = m["device_peak_bytes"] if cuda else (m["child_maxrss_bytes"] or m["rss_peak_bytes"])
        start = m["device_start_bytes"] if cuda else m["rss_start_bytes"]
        pred = "-" if r["speedup_predicted"] is None else f"{r['speedup_predicted']:.2f}x"
        lines.append(
            f"| {r['name']} | {r['counts']['drafter_forwards']} | {r['counts']['target_forwards']} | "
            f"{r['s_per_block']:.3f} | {r['wall_s_median'] / meta['blocks']:.3f} | "
            + " | ".join(f"{p[k]:.3f}" for k in PHASES)
            + f" | {_gib(peak)} | {_gib(resident if cuda else start)} | {_gib(est)} | {r['speedup_measured']:.2f}x | "
            f"{r['speedup_measured_median']:.2f}x | {pred} | {r['overhead_s']:.3f} s ({r['overhead_share']:.1%}) |")
    over = meta.get("route_overhead_per_block") or {}
    if over:
        lines += ["", "Routing cost per drafted block (decode of its latent frames by the routing decoder + ImageReward "
                  "on its frames, unit costs measured here" + (", and projected at full size" if meta.get("projection")
                                                               else "") + "): " + "; ".join(
            f"{name} {o['total_s'] * 1e3:.1f} ms ({o['decode_s'] * 1e3:.1f} + {o['score_s'] * 1e3:.1f})"
            + (f", full size {meta['projection']['route_overhead_per_block'][name]['total_s'] * 1e3:.0f} ms"
               if meta.get("projection") and name in meta["projection"]["route_overhead_per_block"] else "")
            for name, o in over.items()) + ". Rows' routing decoders: " + ", ".join(
            f"{r['id']} {r['route_decoder']}" for r in rows if r["route_overhead_per_block"] is not None) + "."]
    if meta.get("compile_counters"):
        lines += ["", "torch.compile per recipe and role (graphs compiled / graph breaks; warm-up plus each row's "
                  "fastest run): " + "; ".join(f"{recipe} {role} {c['compilations']} / {c['graph_breaks']}"
                                                for recipe, roles in meta["compile_counters"].items()
                                                for role, c in roles.items())]
    if meta["blocks"] >= 2 * TREND_FROM_BLOCK:
        lines += ["", f"Seconds per block from block {rows[0]['trend']['from_block']} on (least-squares slope; median "
                  f"per {TREND_WINDOW}-block window of the accepted blocks, wall / CPU ms) and memory "
                  f"({'device peak' if cuda else 'RSS'}) at the first and last of those blocks:", ""]
        for r in rows:
            t = r["trend"]
            wins = ", ".join(f"{w['first_block']}-{w['last_block']}: {w['accepted']['wall_s'] * 1e3:.0f} / "
                             f"{w['accepted']['cpu_s'] * 1e3:.0f}" for w in t["windows"] if "accepted" in w)
            lines.append(f"- {r['name']}: slope {t['s_per_block_slope'] * 1e3:+.3f} ms (wall), "
                         f"{t['cpu_s_per_block_slope'] * 1e3:+.3f} ms (CPU) per block per block; {wins}; memory "
                         f"{_gib(t['memory_first_bytes'])} -> {_gib(t['memory_last_bytes'])} GiB")
    lines += ["", "Unit costs (micro-benchmarks apart from the runs, min / median ms per unit; DiT calls are named "
              "role, kind, query frames + cached frames; the JSON adds the cached lengths interpolated between these):",
              "", "| call | min ms | median ms | samples |", "|---|---|---|---|"]
    for label, u in meta["unit_s"].items():
        if not u["interpolated"]:
            lines.append(f"| {label} | {u['min_s'] * 1e3:.2f} | {u['median_s'] * 1e3:.2f} | {u['n']} |")
    proj = meta.get("projection")
    if proj:
        lines += ["", f"**Projection, not a measurement** ({proj['label']}):", "",
                  "| configuration | shares here (dit / dit context / decode / route decode / encode / score) | "
                  "full-size FLOP shares "
                  "| projected full-size time shares | projected full-size speedup |", "|---|---|---|---|---|"]
        for r in rows:
            pc = proj["configs"][r["id"]]
            sp = "-" if pc["projected_speedup"] is None else f"{pc['projected_speedup']:.2f}x"
            lines.append(f"| {r['name']} | {_shares(pc['shares_here'])} | {_shares(pc['full_size_flop_shares'])} | "
                         f"{_shares(pc['projected_shares'])} | {sp} |")
    return "\n".join(lines) + "\n"


def _shares(d: dict[str, float]) -> str:
    order = ("dit", "dit context", "decode", "route decode", "encode", "score")
    return " / ".join(f"{d.get(k, 0.0):.0%}" for k in order)


# ----------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=tuple(SCALES), default="tiny")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda: bf16; cpu: fp32)")
    ap.add_argument("--json", default=None, help="where to write the JSON (default out/bench/scale-<size>.json)")
    ap.add_argument("--md", default=None, help="where to write the markdown table (default next to the JSON)")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                    help=f"interleaved rounds over the configurations (default {DEFAULT_ROUNDS})")
    ap.add_argument("--unit-reps", type=int, default=1, help="micro-benchmark repeats per class per round")
    ap.add_argument("--configs", default="all",
                    help=f"comma-separated configurations to run: {', '.join(CONFIGS)} (default all)")
    ap.add_argument("--blocks", type=int, default=BLOCKS, help=f"blocks per video (default {BLOCKS})")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (0: torch's default; 1 by default: steadier on a shared CPU)")
    add_compile_arg(ap)
    ap.add_argument("--recipe", default="krea", type=recipe_arg,
                    help=f"both roles' context recipe: {', '.join(RECIPE_NAMES)}, parameters after a colon "
                         "(longlive:window=15,sink=3; default krea)")
    ap.add_argument("--drafter-recipe", default=None, type=recipe_arg, help="the drafter's recipe (default --recipe)")
    ap.add_argument("--target-recipe", default=None, type=recipe_arg, help="the target's recipe (default --recipe)")
    ap.add_argument("--memo-gb", type=float, default=DEFAULT_MEMO_BYTES / GIB,
                    help=f"memo budget in GiB, reuse across runs only (default the engine's "
                         f"{DEFAULT_MEMO_BYTES / GIB:g}; each run here starts with an empty memo)")
    ap.add_argument("--isolation", choices=("auto", "fork", "none"), default="auto",
                    help="auto: each CPU run in a forked child (its own peak RSS), in-process on CUDA")
    ap.add_argument("--project", choices=("auto", "yes", "no"), default="auto",
                    help="full-size projection from unit costs and FLOPs (auto: for --size mid)")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="start no round expected to end after this")
    return ap.parse_args(argv)


def make_setup(a: argparse.Namespace, workdir: Path) -> tuple[Setup, float]:
    """Build the models and the generation for the arguments; returns (setup, build seconds)."""
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch sees no CUDA device")
    if a.blocks < 1:
        raise SystemExit("--blocks must be >= 1")
    scale = SCALES[a.size]
    if device.type == "cpu" and hasattr(os, "sysconf"):  # refuse what cannot be built in RAM (full size in fp32)
        need = 4 * (scale.drafter.num_params() + scale.target.num_params())
        ram = os.sysconf("SC_PHYS_PAGES") * PAGE
        if need > ram:
            raise SystemExit(f"--size {a.size} on the CPU needs {need / GIB:.0f} GiB for the DiT weights in fp32, "
                             f"more than this machine's {ram / GIB:.0f} GiB: use --device cuda or a smaller size")
    t0 = time.perf_counter()
    models = build_models(scale, device, a.compile, workdir)
    build_s = time.perf_counter() - t0
    emb = demo_embeddings(DEMO_PROMPT, scale.target.text_dim)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, emb), scale.width, scale.height, a.blocks, 42)
    geometry = Geometry(scale.width, scale.height, spec.frames_per_block, emb, DEMO_PROMPT)
    setup = Setup(a.size, scale, device, models, spec, recipe_by_name(a.drafter_recipe or a.recipe),
                  recipe_by_name(a.target_recipe or a.recipe), int(a.memo_gb * GIB), geometry, compile=a.compile)
    for r in (setup.drafter_recipe, setup.target_recipe):
        r.validate(spec)
    return setup, build_s


def select_configs(spec: str) -> list[Config]:
    if spec == "all":
        return list(CONFIGS.values())
    ids = [x.strip() for x in spec.split(",") if x.strip()]
    found = {x: CONFIGS.get(x) or stride_config(x) for x in ids}
    bad = [x for x, c in found.items() if c is None]
    if bad or not ids:
        raise SystemExit(f"--configs: unknown {bad or spec!r}; choose from {', '.join(CONFIGS)}, stride:k=K "
                         f"(K >= 1) or all")
    return [found[x] for x in ids]


def bench(a: argparse.Namespace, setup: Setup, build_s: float, command: str) -> dict:
    """Warm-up, interleaved rounds, summary (+ projection): the JSON document."""
    configs = select_configs(a.configs)
    isolation = choose_isolation(a.isolation, setup.device)
    weights = weight_bytes(setup.models)
    resident = torch.cuda.memory_allocated() if setup.cuda else rss_bytes()
    t_warm = time.perf_counter()
    warm = Config("warm-up", "warm-up", True, lambda n: FixedPattern(WARMUP_PATTERN[:n]))
    warm_res = run_config(setup, warm, blocks=min(len(WARMUP_PATTERN), a.blocks))  # every model and kernel shape, untimed
    warm_s = time.perf_counter() - t_warm
    print(f"size {a.size}: built in {build_s:.1f} s, warm-up {warm_s:.1f} s; isolation {isolation}", flush=True)
    rr = run_rounds(setup, configs, a.rounds, isolation, a.unit_reps, a.deadline_s)
    rows, unit_s = summarize(setup, configs, rr)
    costs = rr.units.costs()
    dit_dtype = run_dtypes(setup.device)[0]
    meta = {
        "size": a.size, "device": str(setup.device), "dtype": str(dit_dtype).replace("torch.", ""),
        "machine": machine(), "command": command, "blocks": setup.spec.num_blocks, "width": setup.scale.width,
        "height": setup.scale.height,
        "recipes": {"drafter": setup.drafter_recipe.name, "target": setup.target_recipe.name},
        "compile": a.compile, "compiled": bool(a.compile),
        "compiled_models": compiled_models(setup.models.target, setup.models.drafter),
        "rounds": a.rounds, "rounds_run": len(rr.orders), "stopped_early": rr.stopped_early,
        "orders": rr.orders, "isolation": isolation, "threads": torch.get_num_threads(),
        "memo_bytes": setup.memo_bytes,
        "models": {"drafter": dataclasses.asdict(setup.scale.drafter), "target": dataclasses.asdict(setup.scale.target),
                   "vae": setup.scale.vae, "reward": setup.scale.reward.name},
        "params": {"drafter": setup.scale.drafter.num_params(), "target": setup.scale.target.num_params()},
        "build_s": build_s, "warmup_s": warm_s, "weights_bytes": weights, "resident_bytes": resident,
        "resident_kind": "torch.cuda.memory_allocated after the build" if setup.cuda else "process RSS after the build",
        "unit_s": {c.label: {"min_s": u.min_s, "median_s": u.median_s, "n": u.n,
                             "interpolated": u.measured_at.prefix < 0} for c, u in sorted(costs.items())},
        "forward_ratio": _forward_ratio(unit_s),
        "memory_estimate": memory_estimate(setup, weights),
        "route_overhead_per_block": route_overhead(setup, unit_s),
        "compile_counters": compile_totals(setup, warm_res, rr),
    }
    if a.project == "yes" or (a.project == "auto" and a.size == "mid"):
        best = {r["id"]: Counter({c: n for c, n in run_units(min(rr.runs[r["id"]], key=lambda x: x["wall"])).items()})
                for r in rows}
        meta["projection"] = projection(setup, rows, best, unit_s)
    return {**meta, "rows": rows}


def compile_totals(s: Setup, warm: dict, rr: Rounds) -> dict | None:
    """torch.compile's graphs and graph breaks per recipe and role: the warm-up (this process: it compiles what the
    first blocks meet) plus each configuration's fastest run (forked children compile again what they meet first).
    None when the DiTs run eager."""
    if not s.compile:
        return None
    total = warm["compile"]
    for runs in rr.runs.values():
        total = add_counts(total, min(runs, key=lambda r: r["wall"])["compile"])
    return by_recipe(total, {"drafter": s.drafter_recipe.name, "target": s.target_recipe.name})


def _forward_ratio(unit_s: dict[CallClass, float]) -> float | None:
    """Target : drafter cost of the costliest denoising forward each."""
    def top(role):
        xs = [v for c, v in unit_s.items() if c.kind == "denoise" and c.role == role]
        return max(xs) if xs else None
    d, t = top("drafter"), top("target")
    return t / d if d and t else None


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    out_json = Path(a.json or f"out/bench/scale-{a.size}.json")
    out_md = Path(a.md) if a.md else out_json.with_suffix(".md")
    out_json.parent.mkdir(parents=True, exist_ok=True)
    command = "./dev.sh bench " + " ".join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="sdvg-bench-") as tmp:
        setup, build_s = make_setup(a, Path(tmp))
    doc = bench(a, setup, build_s, command)
    table = markdown(doc["rows"], doc)
    out_json.write_text(json.dumps(doc, indent=1, default=str))
    out_md.write_text(table)
    print(table)
    print(f"build {build_s:.1f} s, warm-up {doc['warmup_s']:.1f} s; wrote {out_json} and {out_md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
