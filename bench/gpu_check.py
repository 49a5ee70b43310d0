"""One command for the first GPU: the full-size benchmark, the memory table and the CUDA peer ratio, into one folder.

    ./dev.sh gpu-check --out DIR [--gpu h200|h100] [--comfyui COMFYUI_DIR] [--rounds 3]
    ./dev.sh gpu-check --dry-run [--gpu h100] [--out DIR]      # on any CPU, before a GPU exists

The real run (one H200 or H100, within `--budget-s`, 8 minutes by default, model build included):
1. builds the full-size models with random weights on the device (1.3B + 14B bf16 DiTs made there directly, the
   Wan 2.1 VAE, ImageReward), refusing before any work when the memory estimate does not fit the device;
2. runs the scale benchmark (bench/bench_scale.py: 9 blocks at 832x480, the five configurations, interleaved
   rounds; no round starts that would end past the budget's share for it) -> DIR/bench.json, DIR/bench.md;
3. measures the memory table of docs/vram.md (each model call alone: torch.cuda.max_memory_allocated above what
   was allocated before it, plus the model's weights, beside memory.py's computed figure) -> DIR/memory.json/.md;
4. measures the host-device traffic per block (bench/traffic.py: one SDVG generation of the 6/8 pattern's first
   blocks, forced / accepted / rejected, under a dispatch-mode counter of device crossings and host reads, plus the
   syncs CUDA itself reports; once with ImageReward's PIL preprocessing, once with the tensor path)
   -> DIR/traffic.json, DIR/traffic.md;
5. the routing-cost phase (bench/route_phase.py; UNVERIFIED, never run on a GPU; in the time the budget has left):
   one block's decode by the full VAE and by the tiny routing decoder (TAEHV at taew2_1's widths, random weights)
   and ImageReward on its frames, each decoder's device peak -> DIR/route-overhead.json (the benchmark's own JSON
   also prices routing a block with each decoder from its unit costs: `route_overhead_per_block`; its tiny-decoder
   configuration, sdvg-taehv, is left out of the default plan to keep the budget: --configs adds it);
5b. the CUDA graph phase (bench/cuda_graph.py; UNVERIFIED, never run on a GPU; in the time the budget has left,
   skipped with a note under GRAPH_MIN_S): each DiT's steady-state Krea block
   call captured as a torch.cuda.CUDAGraph with static input, output and KV buffers, replayed against eager (max
   |diff|), replayed again for the next block (new context rebuilt into the same KV buffer, new latents copied into
   the same input), eager against replay times -> DIR/cuda-graph.json;
6. with a ComfyUI checkout (--comfyui or COMFYUI_DIR), the peer ratio: tests/comfy_peer_probe.py on CUDA at the
   real 1.3B size (30 layers, 832x480) -> DIR/peer.json; and the Dynamic VRAM phase: an SDVG generation through the
   MODEL input loaded by ComfyUI's own loader (0.33: ModelPatcherDynamic on NVIDIA), every load_models_gpu and
   free_memory call recorded (tests/comfy_dynamic_vram_run.py) -> DIR/dynamic-vram.json; UNVERIFIED: this phase
   has never run on a GPU, its output is the first evidence of how the memo behaves next to Dynamic VRAM;
   and the AR sampler phase (ComfyUI 0.33+): core's Sampler AR Video and SDVG Sampler (AR video) on the same causal_ar
   MODEL from core's loader (Dynamic VRAM on NVIDIA), the model compiler's and CUDA graphs' switches as SDVG's model
   calls saw them and after, the graphs a model opened while SDVG sampled, core's noise rule on CUDA
   (tests/comfy_ar_gpu_run.py) -> DIR/ar-sampler.json; UNVERIFIED likewise;
7. DIR/gpu-check.json and DIR/gpu-check.md: everything above, the phase times and the dry-run estimate beside them.

The dry run builds all four models at full size on the meta device (no memory), runs every call the plan makes
there (each DiT forward shape, text encode, VAE decode and encode, ImageReward's towers) to check output shapes
and count FLOPs, counts the calls of every configuration with the real engine on tiny models (VAE and scorer
replaced by shape-correct stand-ins: decisions are fixed patterns, so the calls do not depend on their values),
makes the CUDA graph phase's block calls on the meta models (shapes, and the same static input tensors from call to
call), and prints the plan, the estimated peak memory and the estimated time on the named GPU (bench/gpu_model.py: an
explicit FLOP / bandwidth model, an estimate). It exits 1 when the peak does not fit the GPU or the time exceeds
the budget.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_scale as bs  # noqa: E402
import cuda_graph  # noqa: E402
import route_phase  # noqa: E402
import traffic  # noqa: E402
from gpu_model import (  # noqa: E402
    CPU_INIT_PARAMS_PER_S, ENGINE_S_PER_BLOCK, FIRST_CALL_S, GPUS, MEMORY_EFFICIENCY, STARTUP_S,
    USABLE_MEMORY_FRACTION, GPUSpec,
    call_seconds, fits,
)
from scale_models import SCALES, Models, build_meta, run_dtypes, weight_bytes  # noqa: E402
from units import (DIT_KINDS, ROUTE_DECODE_KINDS, CallClass, Geometry, _dit_plan, _Setup, class_flops, price,  # noqa: E402
                   unit_call)

from sdvg_core.demo.tiny import DEMO_PROMPT, random_vae  # noqa: E402
from sdvg_core.engine.config import DEFAULT_MEMO_BYTES  # noqa: E402
from sdvg_core.engine.engine import Engine  # noqa: E402
from sdvg_core.engine.memory import GIB, estimate_for_spec  # noqa: E402
from sdvg_core.engine.recipes import recipe_arg, recipe_by_name  # noqa: E402
from sdvg_core.engine.state import GenerationSpec, PromptConditioning  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402
from sdvg_core.models.taehv import TAEHVMemory  # noqa: E402
from sdvg_core.models.vae import VAE_PRESETS, DecoderCache  # noqa: E402
from sdvg_core.demo.tiny_taehv import tiny_taehv  # noqa: E402
from sdvg_core.models.wan import CausalWan, build_random  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 480.0  # issue 19: the whole check within 8 minutes on one H200 or H100, model build included
# what the phases after the benchmark get (memory table, peer probe, writing): the benchmark stops starting rounds
# that would eat into it
AFTER_BENCH_RESERVE_S = 120.0
# tests/comfy_peer_probe.py on CUDA: ComfyUI's imports, two 1.3B builds (fp32, bf16) and a few forwards (assumed)
PEER_S = 60.0
PEER_ARGS = ("--layers", "30", "--latent", "60x104", "--repeats", "5")  # the real 1.3B at 832x480 (4,680 tokens)
# the traffic run: blocks 0-4 of the 6/8 pattern are forced, accepted, accepted (Krea's first anchor), rejected,
# accepted: every kind of block once; run once per ImageReward preprocessing path
TRAFFIC_BLOCKS = 5
TRAFFIC_PREPROCESSING = ("pil", "tensor")
# the dispatch mode's Python work per aten op, as a factor on an unobserved run: measured 1.23-1.25x on the tiny
# bench models (CPU, 5 blocks, many short ops: the worst case); full-size kernels run longer, so 1.5 is a margin
TRAFFIC_OVERHEAD = 1.5
# the CUDA graph phase runs in what the budget has left after the measured phases (the dry run estimates it at
# ~9 s for the 1.3B and 14B block calls on an H100; it is not in the budgeted total), when at least this is left
GRAPH_MIN_S = 20.0
# the routing-cost phase runs after the CUDA graph phase in what is left, when at least this is left (the dry run
# estimates it at about a second on an H100: 2 x 5 block decodes and 8 scorings of 12 frames)
ROUTE_MIN_S = 10.0
# the benchmark's configurations the check runs by default: all but the tiny-decoder one (bench_scale.ROUTE_CONFIG),
# which would add a sixth of the rounds' time to a budget that has no room for it; the routing-cost phase measures
# the tiny decoder instead
DEFAULT_CONFIGS = ",".join(cid for cid in bs.CONFIGS if cid != bs.ROUTE_CONFIG.id)
# the docs/vram.md rows: (role, recipe) per DiT call, then the VAE decode and the scorer
MEMORY_ROWS = (("target", "krea"), ("drafter", "krea"), ("target", "self_forcing"), ("drafter", "self_forcing"))


# ----------------------------------------------------------------------------------------------- call counts
class StubScorer:
    """Stands in for ImageReward when only the calls are counted: one zero reward per frame."""

    key = "stub-scorer"

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        return torch.zeros(frames.shape[0])


def stub_vae(vae) -> None:
    """Replace the VAE's decode and encode with shape-correct stand-ins (zeros; no compute)."""
    cfg = vae.config
    f = cfg.spatial_compression

    def decode_stream(z, cache=None, rule="standard", interrupt=None):
        consumed = cache.frames_consumed if cache is not None else 0
        n = cfg.pixel_frames(z.shape[2], includes_first=consumed == 0)
        pixels = torch.zeros(z.shape[0], cfg.image_channels, n, z.shape[3] * f, z.shape[4] * f)
        return pixels, DecoderCache((None,) * vae.decoder_slots, consumed + z.shape[2], rule)

    def encode_anchor_frame(frame, target_hw, interrupt=None):
        return torch.zeros(frame.shape[0], cfg.z_dim, 1, target_hw[0] // f, target_hw[1] // f)

    vae.decode_stream = decode_stream
    vae.encode_anchor_frame = encode_anchor_frame


def stub_route_vae(taehv) -> None:
    """Replace a TAEHV's decode with a shape-correct stand-in (zeros; no compute)."""
    cfg = taehv.config
    f = cfg.spatial_compression

    def decode_stream(z, cache=None, rule="standard", interrupt=None):
        consumed = cache.frames_consumed if cache is not None else 0
        n = cfg.pixel_frames(z.shape[2], includes_first=consumed == 0)
        return (torch.zeros(z.shape[0], cfg.image_channels, n, z.shape[3] * f, z.shape[4] * f),
                TAEHVMemory((None,) * taehv.decoder_slots, consumed + z.shape[2]))

    taehv.decode_stream = decode_stream


def count_calls(configs: list[bs.Config], blocks: int, drafter_recipe: str, target_recipe: str,
                memo_bytes: int) -> tuple[dict[str, Counter], Counter]:
    """Units per call class of every configuration and of the warm-up: the real engine, recipes and (tiny) DiTs,
    with the VAE and scorer stubbed. Call classes are in latent frames, so the counts hold at any size."""
    tiny = SCALES["tiny"]
    nets = [CausalWan(build_random(c, seed=i), c, key=f"count-{c.name}")  # one layer: the counts are the same
            for i, c in enumerate(replace(cfg, num_layers=1) for cfg in (tiny.drafter, tiny.target))]
    vae = random_vae(0, tiny.vae)
    stub_vae(vae)
    route_vae = tiny_taehv(0)
    stub_route_vae(route_vae)
    models = Models(nets[0], nets[1], vae, StubScorer(), route_vae)
    emb = demo_embeddings(DEMO_PROMPT, tiny.target.text_dim)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, emb), tiny.width, tiny.height, blocks, 42)
    setup = bs.Setup("tiny", tiny, torch.device("cpu"), models, spec, recipe_by_name(drafter_recipe),
                     recipe_by_name(target_recipe), memo_bytes,
                     Geometry(tiny.width, tiny.height, spec.frames_per_block, emb, DEMO_PROMPT))
    per = {c.id: bs.run_units(bs.run_config(setup, c)) for c in configs}
    warm = bs.Config("warm-up", "warm-up", True, lambda n: bs.FixedPattern(bs.WARMUP_PATTERN[:n]))
    return per, bs.run_units(bs.run_config(setup, warm, blocks=min(len(bs.WARMUP_PATTERN), blocks)))


# ----------------------------------------------------------------------------------------------- shapes on meta
def expected_shape(cls: CallClass, scale, g: Geometry, vae_cfg, frames_per_block: int) -> tuple[int, ...]:
    """What a call of `cls` must return at full size (DiT flow, cache length, text K/V, pixels, latents, rewards)."""
    f = vae_cfg.spatial_compression
    h, w = g.height // f, g.width // f
    cfg = scale.target if cls.role == "target" else scale.drafter
    if cls.kind == "denoise":
        return (1, cls.frames, cfg.in_dim, h, w)
    if cls.kind == "context":  # no flow; timed without commit, so the view it returns is the one it was given
        return (cls.prefix * cfg.tokens_per_frame(h, w),)
    if cls.kind == "text":
        return (cfg.num_layers, 1, cfg.num_heads, cfg.text_len, cfg.head_dim)
    if cls.kind in ("decode_first", "route_decode_first"):
        return (1, vae_cfg.image_channels, vae_cfg.pixel_frames(1), g.height, g.width)
    if cls.kind in ("decode", "route_decode"):
        return (1, vae_cfg.image_channels, vae_cfg.pixel_frames(1, includes_first=False), g.height, g.width)
    if cls.kind == "encode":
        return (1, vae_cfg.z_dim, 1, h, w)
    return (vae_cfg.pixel_frames(frames_per_block, includes_first=False),)  # score: one reward per frame


def memory_row_classes(spec: GenerationSpec) -> dict[str, list[CallClass]]:
    """The calls each memory-table row makes: the text K/V it needs, and the measured call last (its cache is a view
    of the recipe's full window, filled without model calls)."""
    F = spec.frames_per_block
    out = {}
    for role, name in MEMORY_ROWS:
        prefix = recipe_by_name(name).window_frames(F, spec.num_latent_frames) - F
        out[f"{role} {name}"] = [CallClass("text", role), CallClass("denoise", role, F, prefix)]
    out["vae decode"] = [CallClass("decode_first"), CallClass("decode")]
    out["imagereward"] = [CallClass("score_frame")]
    return out


# ----------------------------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """What the real run will do and what the dry run estimates it costs."""

    gpu: GPUSpec
    rounds: int
    configs: list[bs.Config]
    blocks: int
    drafter_recipe: str
    target_recipe: str
    memo_bytes: int
    peer: bool
    size: str = "full"  # other sizes and the CPU exercise the real run's code in tests
    device: str = "cuda"


def plan_setup(plan: Plan, models: Models) -> bs.Setup:
    """The benchmark's setup for the plan's size and device around `models` (real or meta)."""
    scale = SCALES[plan.size]
    emb = demo_embeddings(DEMO_PROMPT, scale.target.text_dim)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, emb), scale.width, scale.height, plan.blocks, 42)
    return bs.Setup(plan.size, scale, torch.device(plan.device), models, spec, recipe_by_name(plan.drafter_recipe),
                    recipe_by_name(plan.target_recipe), plan.memo_bytes,
                    Geometry(scale.width, scale.height, spec.frames_per_block, emb, DEMO_PROMPT))


def memory_table_peak(setup: bs.Setup, weights: dict[str, int]) -> tuple[int, list[dict]]:
    """Computed per-call figures of the memory table (memory.py) and the check's peak while measuring them (all
    models resident, one call's needs beside them)."""
    rows = []
    dit_dtype, vae_dtype, _ = run_dtypes(setup.device)
    vae_cfg = VAE_PRESETS[setup.scale.vae]
    for role, name in MEMORY_ROWS:
        cfg = setup.scale.target if role == "target" else setup.scale.drafter
        d = estimate_for_spec(setup.spec, recipe_by_name(name), [(cfg, dit_dtype)], vae_cfg, vae_dtype).dits[0]
        rows.append({"row": f"{role} {name}", "computed_total_bytes": d.total, "computed_step_bytes": d.step,
                     "weights_bytes": weights[role], "kv_bytes": d.kv, "text_kv_bytes": d.text_kv,
                     "activation_bytes": d.activations})
    est = estimate_for_spec(setup.spec, setup.target_recipe, [(setup.scale.target, dit_dtype)], vae_cfg, vae_dtype,
                            vae_weight_bytes=weights["vae"])
    rows.append({"row": "vae decode", "computed_total_bytes": est.vae_total,
                 "computed_step_bytes": est.vae_total - est.vae_weights, "weights_bytes": weights["vae"]})
    rows.append({"row": "imagereward", "computed_total_bytes": None, "computed_step_bytes": None,
                 "weights_bytes": weights["scorer"]})
    step = max(r["computed_step_bytes"] or 0 for r in rows)
    return sum(weights.values()) + step, rows


@dataclass
class Measured:
    """What the dry run measures on the CPU (independent of the GPU, the rounds and the memo budget): the meta
    models, the call counts of every configuration, each call class's FLOPs and the shape checks."""

    meta: Models
    weights: dict[str, int]
    params: dict[str, int]
    setup: bs.Setup
    per_config: dict[str, Counter]
    warm: Counter
    mem_rows: dict[str, list[CallClass]]
    micro: set[CallClass]
    flops: dict
    checks: list[dict]
    seconds: float
    cuda_graph: dict | None = None  # the CUDA graph phase's block calls on the meta models (cuda_graph.dry_run)


def measure_plan(plan: Plan, log=print) -> Measured:
    """Meta models at the plan's size, call counts, FLOPs and shapes of every call class the real run makes."""
    t0 = time.perf_counter()
    scale = SCALES[plan.size]
    meta = build_meta(scale, plan.device)
    weights = weight_bytes(meta)
    params = {"drafter": sum(p.numel() for p in meta.drafter.net.parameters()),
              "target": sum(p.numel() for p in meta.target.net.parameters())}
    setup = plan_setup(plan, meta)
    g, spec = setup.geometry, setup.spec
    log(f"meta models at size {plan.size} built in {time.perf_counter() - t0:.1f} s: drafter "
        f"{params['drafter'] / 1e9:.2f} B params, target {params['target'] / 1e9:.2f} B; weights " +
        ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in weights.items()))

    t1 = time.perf_counter()
    per_config, warm = count_calls(plan.configs, plan.blocks, plan.drafter_recipe, plan.target_recipe,
                                   plan.memo_bytes)
    mem_rows = memory_row_classes(spec)
    all_units: Counter = Counter()
    for u in [*per_config.values(), warm]:
        all_units.update(u)
    micro = _dit_plan(all_units) | {c for c in all_units if c.kind not in DIT_KINDS}
    route = {CallClass(k) for k in ("decode_first", "decode", *ROUTE_DECODE_KINDS, "score_frame")}  # route phase
    micro |= {CallClass("route_decode")}  # the benchmark's unit costs price routing with the tiny decoder too
    classes = set(all_units) | micro | route | {c for cs in mem_rows.values() for c in cs}
    log(f"call counts of {len(per_config)} configurations ({plan.blocks} blocks, real engine, stubbed VAE/scorer) "
        f"in {time.perf_counter() - t1:.1f} s; {len(classes)} call classes")

    t2 = time.perf_counter()
    flops = class_flops(meta, g, classes, full_depth=True)
    vae_cfg = VAE_PRESETS[scale.vae]
    checks = []
    for c in sorted(classes):
        if flops[c].shape == ():  # interpolated: no call made
            continue
        want = expected_shape(c, scale, g, vae_cfg, spec.frames_per_block)
        got = flops[c].shape
        ok = tuple(got) == want
        if flops[c].extrapolated is not None:  # full depth: the layer extrapolation must give the same count
            ok = ok and abs(flops[c].extrapolated - flops[c].flops) <= 1e-9 * flops[c].flops
        checks.append({"call": c.label, "expected": list(want), "got": list(got), "ok": ok,
                       "tflops": flops[c].flops / 1e12, "note": flops[c].detail})
    log(f"meta forwards of every call class in {time.perf_counter() - t2:.1f} s: "
        f"{sum(x['ok'] for x in checks)}/{len(checks)} shapes (and layer extrapolations) as expected")
    t3 = time.perf_counter()
    graph = cuda_graph.dry_run(meta, spec.latent_hw)
    log(f"CUDA graph phase's block calls on meta in {time.perf_counter() - t3:.1f} s: static inputs reused: "
        f"{all(graph[r]['ok'] for r in ('drafter', 'target'))}")
    return Measured(meta, weights, params, setup, per_config, warm, mem_rows, micro, flops, checks,
                    time.perf_counter() - t0, graph)


def price_plan(plan: Plan, m: Measured) -> dict:
    """The estimates for the plan's GPU, rounds and memo budget from what `measure_plan` found."""
    setup = replace(m.setup, memo_bytes=plan.memo_bytes)
    g, spec, weights = setup.geometry, setup.spec, m.weights
    classes = set(m.flops)
    unit_s = {c: call_seconds(c, m.flops[c].flops, _bytes_moved(c, m.meta, g), plan.gpu) for c in classes}
    cfg_s = {cid: price(u, unit_s) + plan.blocks * ENGINE_S_PER_BLOCK for cid, u in m.per_config.items()}
    micro_s = sum(unit_s[c] * _units_per_call(c, spec) for c in m.micro)
    round_s = sum(cfg_s.values()) + 2 * micro_s  # each round's micro-benchmarks: a warm call, then the timed one
    cpu_params = sum(p.numel() for p in m.meta.vae.parameters()) + sum(p.numel() for p in m.meta.scorer.parameters())
    build_s = STARTUP_S + cpu_params / CPU_INIT_PARAMS_PER_S + (weights["drafter"] + weights["target"]) / (
        plan.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY)
    warm_s = price(m.warm, unit_s) + FIRST_CALL_S  # the untimed warm-up generation and first-call costs
    mem_s = sum(unit_s[c] * _units_per_call(c, spec) for cs in m.mem_rows.values() for c in cs)
    traffic_s = (len(TRAFFIC_PREPROCESSING) * TRAFFIC_OVERHEAD * TRAFFIC_BLOCKS / plan.blocks *
                 cfg_s.get("sdvg", max(cfg_s.values())))
    graph_s = sum(unit_s.get(CallClass("denoise", role, spec.frames_per_block, cuda_graph.CONTEXT_FRAMES), 0.0) *
                  cuda_graph.CALLS_PER_ROLE for role in ("drafter", "target"))
    route_s = route_phase.dry_run_seconds(unit_s, spec.frames_per_block)
    phases = {"build": build_s, "warm-up": warm_s, "benchmark rounds": plan.rounds * round_s,
              "memory table": mem_s, "traffic": traffic_s, "peer probe": PEER_S if plan.peer else 0.0}
    total_s = sum(phases.values())

    bench_mem = bs.memory_estimate(setup, weights)
    table_peak, table_rows = memory_table_peak(setup, weights)
    peak = max(bench_mem["bench_peak_bytes"], table_peak)
    ok_mem, ok_time = fits(peak, plan.gpu), total_s <= BUDGET_S
    shapes_ok = all(x["ok"] for x in m.checks) and (m.cuda_graph is None or all(
        m.cuda_graph[r]["ok"] for r in ("drafter", "target")))
    shares = {cid: bs.shares(u, {c: m.flops[c].flops for c in u}) for cid, u in m.per_config.items()}
    scale = setup.scale
    return {
        "gpu": plan.gpu.__dict__, "budget_s": BUDGET_S, "usable_memory_fraction": USABLE_MEMORY_FRACTION,
        "plan": {"size": plan.size, "width": scale.width, "height": scale.height, "blocks": plan.blocks,
                 "rounds": plan.rounds, "configs": [c.id for c in plan.configs],
                 "recipes": {"drafter": plan.drafter_recipe, "target": plan.target_recipe},
                 "memo_bytes": plan.memo_bytes, "peer_probe": plan.peer, "memory_rows": list(m.mem_rows)},
        "params": m.params, "weights_bytes": weights, "shape_checks": m.checks, "shapes_ok": shapes_ok,
        "not_checked_on_meta": ["the engine's own bookkeeping at full size (latent hashing, memo, pixel copies run "
                                "on tiny models only)", "ImageReward's PIL preprocessing and the prompt's padding "
                                "mask", "CUDA kernels and their numerics (meta tensors carry shapes only)"],
        "calls": {cid: {c.label: n for c, n in sorted(u.items())} for cid, u in m.per_config.items()},
        "estimated_unit_s": {c.label: unit_s[c] for c in sorted(classes)},
        "estimated_config_s": cfg_s, "full_size_flop_shares": shares,
        "estimated_phase_s": phases, "estimated_total_s": total_s,
        # run in the time the budget has left after the others (real_run skips it otherwise): not in the total
        "optional_phase_s": {"cuda graph": graph_s, "route overhead": route_s},
        "memory": {"bench": bench_mem, "memory_table_peak_bytes": table_peak, "memory_table": table_rows,
                   "estimated_peak_bytes": peak, "limit_bytes": int(plan.gpu.memory_bytes * USABLE_MEMORY_FRACTION)},
        "fits_memory": ok_mem, "fits_budget": ok_time, "ok": ok_mem and ok_time and shapes_ok,
        "cuda_graph": m.cuda_graph, "dry_run_s": m.seconds,
    }


def estimate(plan: Plan, log=print) -> dict:
    """The dry run: `measure_plan` then `price_plan`."""
    return price_plan(plan, measure_plan(plan, log))


def _units_per_call(c: CallClass, spec: GenerationSpec) -> int:
    return 12 if c.kind == "score_frame" else 1  # a micro-benchmark scores one block's frames


def _bytes_moved(c: CallClass, models: Models, g: Geometry) -> float:
    """Bytes one call must stream from HBM at least: its weights, and for a DiT call the cache it attends to."""
    if c.kind in DIT_KINDS or c.kind == "text":
        dit = getattr(models, c.role)
        w = sum(p.numel() * p.element_size() for p in dit.net.parameters())
        if c.kind == "text":
            return w
        f = models.vae.config.spatial_compression
        tpf = dit.cfg.tokens_per_frame(g.height // f, g.width // f)
        kv = 2 * dit.cfg.num_layers * (c.prefix + c.frames) * tpf * dit.cfg.dim * dit.dtype.itemsize
        return w + kv
    module = (models.vae if c.kind in ("decode", "decode_first", "encode") else
              models.route_vae if c.kind in ROUTE_DECODE_KINDS else models.scorer)
    return sum(p.numel() * p.element_size() for p in module.parameters())


def dry_run_markdown(e: dict) -> str:
    gpu = e["gpu"]
    m = e["memory"]
    lines = [f"# GPU check dry run for {gpu['name']} (estimates, not measurements)", "",
             f"Plan: {e['plan']['size']} size {e['plan']['width']}x{e['plan']['height']}, "
             f"{e['plan']['blocks']} blocks, "
             f"configurations {', '.join(e['plan']['configs'])}, {e['plan']['rounds']} interleaved rounds, recipes "
             f"drafter `{e['plan']['recipes']['drafter']}` / target `{e['plan']['recipes']['target']}`, memo "
             f"{e['plan']['memo_bytes'] / GIB:.1f} GiB; memory table rows {', '.join(e['plan']['memory_rows'])}; "
             f"peer probe {'yes' if e['plan']['peer_probe'] else 'no (no ComfyUI checkout given)'}; Dynamic VRAM "
             f"phase {'yes (UNVERIFIED: never run on a GPU yet; not in the time estimate)' if e['plan']['peer_probe'] else 'no'}.", "",
             f"Shapes on meta at full size: {sum(x['ok'] for x in e['shape_checks'])}/{len(e['shape_checks'])} as "
             f"expected. Not checked on meta: {'; '.join(e['not_checked_on_meta'])}.", "",
             "| phase | estimated s |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in e["estimated_phase_s"].items()]
    lines += [f"| **total** (budget {e['budget_s']:.0f} s) | **{e['estimated_total_s']:.1f}** |"]
    lines += [f"| {k} (UNVERIFIED; in the time left, not in the total) | {v:.1f} |"
              for k, v in e.get("optional_phase_s", {}).items()]
    lines += ["",
              f"Estimated peak {m['estimated_peak_bytes'] / GIB:.1f} GiB (benchmark "
              f"{m['bench']['bench_peak_bytes'] / GIB:.1f} GiB: weights "
              f"{sum(m['bench']['weights_bytes'].values()) / GIB:.1f} + memo {m['bench']['memo_bytes'] / GIB:.1f} + "
              f"held {m['bench']['held_bytes'] / GIB:.1f} + largest phase "
              f"{m['bench']['largest_phase_bytes'] / GIB:.1f}; "
              f"memory table {m['memory_table_peak_bytes'] / GIB:.1f} GiB) against {m['limit_bytes'] / GIB:.1f} GiB "
              f"usable ({gpu['memory_bytes'] / 1e9:.0f} GB x {e['usable_memory_fraction']}): "
              f"{'fits' if e['fits_memory'] else 'DOES NOT FIT'}.", "",
              "| configuration | estimated s per video | full-size FLOP shares "
              "(dit / dit context / decode / encode / score) |",
              "|---|---|---|"]
    for cid, s in e["estimated_config_s"].items():
        sh = e["full_size_flop_shares"][cid]
        lines.append(f"| {cid} | {s:.1f} | {bs._shares(sh)} |")
    if e.get("cuda_graph"):
        lines += ["", cuda_graph.markdown(e["cuda_graph"]).rstrip()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- the real run
class MemoryProbe:
    """Bytes in use around one call: CUDA allocator counters, or on the CPU the process RSS and its high-water mark
    (coarse: includes whatever the allocator keeps)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = 0

    def start(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = bs.rss_bytes() or 0
        self.reset()

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            bs.rss_peak_bytes(reset=True)

    def used(self) -> int:
        """Peak bytes above the start since the last reset."""
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        return (bs.rss_peak_bytes() or 0) - self.base


def measure_memory_table(setup: bs.Setup, weights: dict[str, int], computed: list[dict]) -> list[dict]:
    """Each docs/vram.md row's call alone: what it allocates above the resident models, plus its model's weights."""
    probe = MemoryProbe(setup.device)
    spec, g = setup.spec, setup.geometry
    rows = []
    by_name = {r["row"]: r for r in computed}
    for (role, name), cls_list in zip(MEMORY_ROWS, memory_row_classes(spec).values()):
        probe.start()
        s = _Setup(setup.models, g)
        fn, _ = unit_call(s, cls_list[-1])  # builds text K/V and fills the cache block by block, then the call
        probe.reset()
        fn()
        used = probe.used()
        rows.append({**by_name[f"{role} {name}"], "measured_step_bytes": used,
                     "measured_total_bytes": used + weights[role]})
        del s, fn
    for row, cls in (("vae decode", CallClass("decode")), ("imagereward", CallClass("score_frame"))):
        probe.start()
        s = _Setup(setup.models, g)
        fn, _ = unit_call(s, cls)
        probe.reset()
        fn()
        used = probe.used()
        key = "vae" if row == "vae decode" else "scorer"
        rows.append({**by_name[row], "measured_step_bytes": used, "measured_total_bytes": used + weights[key]})
        del s, fn
    gc.collect()
    return rows


def memory_markdown(rows: list[dict], where: str, size: str = "832x480") -> str:
    lines = [f"Per-call memory at {size} ({where}; measured = peak allocated during the call above what was "
             f"allocated before it, plus the model's weights; computed = sdvg_core/engine/memory.py), GiB:", "",
             "| call | weights | computed total | measured total | measured / computed |", "|---|---|---|---|---|"]
    for r in rows:
        comp, meas = r.get("computed_total_bytes"), r.get("measured_total_bytes")
        ratio = f"{meas / comp:.2f}" if comp and meas else "-"
        comp_s = "-" if comp is None else f"{comp / GIB:.2f}"
        meas_s = "-" if meas is None else f"{meas / GIB:.2f}"
        lines.append(f"| {r['row']} | {r['weights_bytes'] / GIB:.2f} | {comp_s} | {meas_s} | {ratio} |")
    return "\n".join(lines) + "\n"


def comfy_python(comfy: str) -> str:
    """ComfyUI's interpreter: COMFYUI_PYTHON, else its .venv, else this one."""
    env = os.environ.get("COMFYUI_PYTHON")
    if env:
        return env
    venv = Path(comfy) / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run_probe(cmd: list[str], timeout_s: float) -> dict:
    """A probe script's JSON line (its last stdout line), or {"error"} with the command."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s", "command": " ".join(cmd)}
    if res.returncode != 0:
        return {"error": res.stderr[-3000:], "command": " ".join(cmd)}
    return {**json.loads(res.stdout.strip().splitlines()[-1]), "command": " ".join(cmd)}


def run_peer(comfy: str, timeout_s: float) -> dict:
    """tests/comfy_peer_probe.py on CUDA at the real 1.3B size: max difference and time ratio vs WanModel.forward."""
    return run_probe([comfy_python(comfy), str(REPO / "tests" / "comfy_peer_probe.py"), comfy, str(REPO), "--device",
                      "cuda", *PEER_ARGS], timeout_s)


def run_dynamic_vram(comfy: str, timeout_s: float) -> dict:
    """tests/comfy_dynamic_vram_run.py on CUDA: a MODEL-input generation under the host's Dynamic VRAM, with its
    load and free events (UNVERIFIED until run on a GPU)."""
    return run_probe([comfy_python(comfy), str(REPO / "tests" / "comfy_dynamic_vram_run.py"), comfy, str(REPO),
                      "--device", "cuda"], timeout_s)


def dynamic_vram_markdown(d: dict) -> str:
    """One paragraph of the Dynamic VRAM phase: the patcher kind, what ComfyUI was asked to free and pin."""
    if "error" in d:
        return f"Dynamic VRAM phase (UNVERIFIED, first GPU run): failed: {d['error'][-500:]}\n"
    frees = [e["free_memory"] for e in d["events"] if "free_memory" in e]
    loads = [e["load"] for e in d["events"] if "load" in e]
    return (f"Dynamic VRAM phase (UNVERIFIED, first GPU run; tests/comfy_dynamic_vram_run.py): MODEL patcher "
            f"{d['dynamic_vram'][0]} (dynamic {d['dynamic_vram'][1]}); {len(loads)} load calls, {len(frees)} free "
            f"calls, for_dynamic {sorted({str(f.get('for_dynamic')) for f in frees})}, largest pins_required "
            f"{max([f.get('pins_required', 0) for f in frees] or [0]) / GIB:.2f} GiB; memo registered "
            f"{d['memo_registered']} holding {d['memo_bytes'] / GIB:.2f} GiB; decisions {d['decisions']}.\n")


def run_ar_sampler(comfy: str, timeout_s: float) -> dict:
    """tests/comfy_ar_gpu_run.py on CUDA: SDVG's AR sampler next to core's on the host's GPU machinery (UNVERIFIED
    until run on a GPU)."""
    return run_probe([comfy_python(comfy), str(REPO / "tests" / "comfy_ar_gpu_run.py"), comfy, str(REPO),
                      "--device", "cuda"], timeout_s)


def ar_sampler_markdown(d: dict) -> str:
    """One paragraph of the AR sampler phase: SDVG vs core's loop, the compiler switches, graphs, the noise rule."""
    head = "AR sampler phase (UNVERIFIED, first GPU run; tests/comfy_ar_gpu_run.py)"
    if "error" in d:
        return f"{head}: failed: {d['error'][-500:]}\n"
    if "skipped" in d:
        return f"{head}: skipped: {d['skipped']}\n"
    return (f"{head}: MODEL patcher {d['patcher'][0]} (dynamic {d['patcher'][1]}), {d['size'][0]}x{d['size'][1]}; "
            f"target-only SDVG vs core's Sampler AR Video max |diff| {d['target_only_max_abs_diff']:.3g} (values up "
            f"to {d['scale']:.3g}); seconds core {d['core_seconds']:.2f}, SDVG target-only "
            f"{d['sdvg_target_only_seconds']:.2f}, SDVG with drafter {d['sdvg_seconds']:.2f}; compiler switches "
            f"before {d['switches_before']}, seen by SDVG's calls {d['switches_seen_by_sdvg_calls']}, after "
            f"{d['switches_after']}; graphs opened while SDVG sampled {d['graphs_opened_while_sdvg_sampled']}; core's "
            f"noise rule on {d['noise_device']} max |diff| {d['noise_rule_max_abs_diff']:.3g}.\n")


def real_run(a: argparse.Namespace, plan: Plan, out: Path) -> int:
    cuda = plan.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu-check needs a CUDA device (use --dry-run on a CPU)")
    t_start = time.perf_counter()
    if cuda:
        where = {"gpu": torch.cuda.get_device_name(),
                 "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory}
    else:  # the real run's code on the CPU (tests): one thread (forked runs), the machine's RAM is the limit
        torch.set_num_threads(1)
        where = {"gpu": bs.machine(), "device_memory_bytes": os.sysconf("SC_PHYS_PAGES") * bs.PAGE}
    doc: dict[str, Any] = {**where, "gpu_model": plan.gpu.__dict__, "torch": torch.__version__,
                           "cuda": torch.version.cuda, "phase_s": {}}

    def save() -> None:
        (out / "gpu-check.json").write_text(json.dumps(doc, indent=1, default=str))

    def phase(name: str, key: str, run: Callable[[], Any], file: str | None = None) -> Any:
        """Run one phase: its seconds in phase_s[name], its result in doc[key] and in <file>.json (key's name)."""
        t = time.perf_counter()
        result = run()
        doc["phase_s"][name] = time.perf_counter() - t
        doc[key] = result
        (out / f"{file or key.replace('_', '-')}.json").write_text(json.dumps(result, indent=1))
        return result

    args = bs.parse_args(["--size", plan.size, "--device", plan.device, "--rounds", str(plan.rounds), "--blocks",
                          str(plan.blocks), "--configs", ",".join(c.id for c in plan.configs),
                          "--drafter-recipe", plan.drafter_recipe, "--target-recipe", plan.target_recipe,
                          "--memo-gb", str(plan.memo_bytes / GIB), "--threads", "0" if cuda else "1",
                          "--json", str(out / "bench.json")])
    # refuse before building when the estimate cannot fit this device
    meta_setup = plan_setup(plan, build_meta(SCALES[plan.size], plan.device))
    weights = weight_bytes(meta_setup.models)
    est = bs.memory_estimate(meta_setup, weights)
    table_peak, computed_rows = memory_table_peak(meta_setup, weights)
    limit = doc["device_memory_bytes"] * USABLE_MEMORY_FRACTION
    doc["memory_estimate"] = {"bench_peak_bytes": est["bench_peak_bytes"], "memory_table_peak_bytes": table_peak}
    if max(est["bench_peak_bytes"], table_peak) > limit:
        doc["error"] = f"estimated peak {max(est['bench_peak_bytes'], table_peak) / GIB:.1f} GiB > {limit / GIB:.1f}"
        save()
        print(doc["error"])
        return 1

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sdvg-gpu-check-") as tmp:
        setup, build_s = bs.make_setup(args, Path(tmp))
    doc["phase_s"]["build"] = time.perf_counter() - t
    print(f"built in {build_s:.1f} s", flush=True)
    args.deadline_s = max(BUDGET_S - (time.perf_counter() - t_start) - AFTER_BENCH_RESERVE_S, 1.0)
    t = time.perf_counter()
    bench_doc = bs.bench(args, setup, build_s, "./dev.sh gpu-check " + " ".join(a.argv))
    doc["phase_s"]["benchmark"] = time.perf_counter() - t
    (out / "bench.json").write_text(json.dumps(bench_doc, indent=1, default=str))
    bench_md = bs.markdown(bench_doc["rows"], bench_doc)
    (out / "bench.md").write_text(bench_md)
    doc["bench"] = {k: v for k, v in bench_doc.items() if k != "rows"} | {
        "rows": [{k: v for k, v in r.items() if k not in ("per_block",)} for r in bench_doc["rows"]]}
    save()

    gc.collect()
    mem_rows = phase("memory table", "memory_table", lambda: measure_memory_table(setup, weights, computed_rows),
                     file="memory")
    mem_md = memory_markdown(mem_rows, f"{doc['gpu']}, " + ("torch.cuda.max_memory_allocated" if cuda else
                                                            "process RSS high-water mark, coarse"),
                            f"{setup.scale.width}x{setup.scale.height}")
    (out / "memory.md").write_text(mem_md)
    save()

    traffic_doc = phase("traffic", "traffic", lambda: measure_traffic(setup))
    traffic_md = "\n".join(traffic.markdown(d, doc["gpu"]) for d in traffic_doc["runs"])
    (out / "traffic.md").write_text(traffic_md)
    save()

    t = time.perf_counter()
    left = BUDGET_S - (t - t_start) - (PEER_S if a.comfyui else 0.0)  # the peer probe keeps its share
    if not cuda:
        graph_doc = {"label": cuda_graph.LABEL, "skipped": "not on CUDA"}
    elif left < GRAPH_MIN_S:
        graph_doc = {"label": cuda_graph.LABEL, "skipped": f"{left:.0f} s of the budget left"}
    else:
        graph_doc = cuda_graph.phase(setup.models, setup.spec.latent_hw)
    doc["phase_s"]["cuda graph"] = time.perf_counter() - t
    doc["cuda_graph"] = graph_doc
    (out / "cuda-graph.json").write_text(json.dumps(graph_doc, indent=1))
    graph_md = cuda_graph.markdown(graph_doc)
    save()

    t = time.perf_counter()
    left = BUDGET_S - (t - t_start) - (PEER_S if a.comfyui else 0.0)
    if left < ROUTE_MIN_S and cuda:
        route_doc = {"label": route_phase.LABEL, "skipped": f"{left:.0f} s of the budget left"}
    else:
        route_doc = route_phase.phase(setup.models, setup.spec, setup.geometry.prompt)
    doc["phase_s"]["route overhead"] = time.perf_counter() - t
    doc["route_overhead"] = route_doc
    (out / "route-overhead.json").write_text(json.dumps(route_doc, indent=1))
    route_md = route_phase.markdown(route_doc)
    save()

    peer_md = "Peer ratio: not run (no ComfyUI checkout: --comfyui or COMFYUI_DIR).\n"
    if a.comfyui and cuda:
        del setup
        gc.collect()
        torch.cuda.empty_cache()
        peer = phase("peer probe", "peer", lambda: run_peer(a.comfyui, BUDGET_S - (time.perf_counter() - t_start)))
        peer_md = ("Peer ratio (pack CausalWan / ComfyUI WanModel.forward, CUDA, real 1.3B, 4,680 tokens): " +
                   (f"fp32 {peer['fp32_time_ratio']:.2f}x (max diff {peer['fp32_max_diff']:.2e}), bf16 "
                    f"{peer['bf16_time_ratio']:.2f}x (max diff {peer['bf16_max_diff']:.3g} at scale "
                    f"{peer['bf16_scale']:.3g})" if "error" not in peer else f"failed: {peer['error'][-500:]}") + "\n")
        dyn = phase("dynamic vram", "dynamic_vram",
                    lambda: run_dynamic_vram(a.comfyui, BUDGET_S - (time.perf_counter() - t_start)))
        peer_md += dynamic_vram_markdown(dyn)
        ars = phase("ar sampler", "ar_sampler",
                    lambda: run_ar_sampler(a.comfyui, BUDGET_S - (time.perf_counter() - t_start)))
        peer_md += ar_sampler_markdown(ars)
    doc["total_s"] = time.perf_counter() - t_start
    save()
    md = [f"# GPU check on {doc['gpu']} (torch {doc['torch']}, CUDA {doc['cuda']}): measured, size {plan.size}",
          f"command: `./dev.sh gpu-check {' '.join(a.argv)}`; total {doc['total_s']:.0f} s (budget {BUDGET_S:.0f} s); "
          "phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in doc["phase_s"].items()), "", bench_md, mem_md, traffic_md,
          graph_md, route_md, peer_md]
    (out / "gpu-check.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


def measure_traffic(setup: bs.Setup, blocks: int = TRAFFIC_BLOCKS) -> dict:
    """The pack's own host-device traffic per block: a fresh engine without the benchmark's per-phase syncs, the
    6/8 pattern's first `blocks` blocks, once per ImageReward preprocessing path the scorer offers."""
    spec = replace(setup.spec, num_blocks=blocks)
    policy = bs.CONFIGS["sdvg"].policy
    scorer = setup.models.scorer
    paths = TRAFFIC_PREPROCESSING if hasattr(scorer, "preprocessing") else ("pil",)
    before = getattr(scorer, "preprocessing", None)
    runs = []
    try:
        for path in paths:
            if before is not None:
                scorer.preprocessing = path
            config = replace(bs.engine_config(setup, lazy=True), sync_timing=False)
            engine = Engine(setup.models.target, setup.models.vae, setup.models.drafter, scorer, config)
            summary, _ = traffic.measure_generation(engine, spec, policy(blocks))
            runs.append({"preprocessing": path, **summary})
            del engine
            gc.collect()
    finally:
        if before is not None:
            scorer.preprocessing = before
    return {"blocks": blocks, "pattern": [r["decision"] for r in runs[0]["per_block"]], "runs": runs}


# ----------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="folder for the JSON and markdown (required for the real run)")
    ap.add_argument("--gpu", choices=tuple(GPUS), default=None,
                    help="the GPU to plan for (default: from the CUDA device's name, else h100, the smaller)")
    ap.add_argument("--dry-run", action="store_true", help="meta-device plan and estimates only, on any CPU")
    ap.add_argument("--comfyui", default=os.environ.get("COMFYUI_DIR"),
                    help="a ComfyUI checkout for the peer ratio (default $COMFYUI_DIR)")
    ap.add_argument("--rounds", type=int, default=bs.DEFAULT_ROUNDS)
    ap.add_argument("--blocks", type=int, default=bs.BLOCKS)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help=f"the benchmark's configurations (default {DEFAULT_CONFIGS}; all: every one, the tiny-decoder "
                         f"one too)")
    ap.add_argument("--recipe", default="krea", type=recipe_arg)
    ap.add_argument("--drafter-recipe", default=None, type=recipe_arg)
    ap.add_argument("--target-recipe", default=None, type=recipe_arg)
    ap.add_argument("--memo-gb", type=float, default=DEFAULT_MEMO_BYTES / GIB)
    ap.add_argument("--size", choices=tuple(SCALES), default="full", help=argparse.SUPPRESS)  # tests: tiny on a CPU
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.argv = argv
    gpu_key = a.gpu or _detect_gpu()
    plan = Plan(GPUS[gpu_key], a.rounds, bs.select_configs(a.configs), a.blocks, a.drafter_recipe or a.recipe,
                a.target_recipe or a.recipe, int(a.memo_gb * GIB), bool(a.comfyui), a.size, a.device)
    if a.dry_run:
        torch.set_num_threads(1)
        e = estimate(plan)
        md = dry_run_markdown(e)
        print(md)
        if a.out:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "dry-run.json").write_text(json.dumps(e, indent=1, default=str))
            (out / "dry-run.md").write_text(md)
        if not e["ok"]:
            why = [w for w, ok in (("the peak does not fit", e["fits_memory"]), ("the time exceeds the budget",
                                   e["fits_budget"]), ("a shape check failed", e["shapes_ok"])) if not ok]
            print(f"dry run FAILED: {', '.join(why)}")
            return 1
        return 0
    if not a.out:
        ap.error("--out DIR is required for the real run")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    return real_run(a, plan, out)


def _detect_gpu() -> str:
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name().lower()
        for key in GPUS:
            if key in name:
                return key
    return "h100"


if __name__ == "__main__":
    raise SystemExit(main())
