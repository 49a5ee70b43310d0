"""Scale benchmark: the real architectures with random weights, 9 blocks, fixed decision patterns, one process.

    ./dev.sh bench --size {tiny,mid,full} [--device cuda] [--json PATH] [--md PATH] [--compile]

Sizes (weights are always seeded random init at these shapes, never read from files):
- full: Wan 2.1 T2V 1.3B drafter + 14B target, the real Wan 2.1 VAE and real-size ImageReward, 832x480,
  bf16 on CUDA (fp32 on CPU). Needs a GPU with room for both DiTs (14B bf16 = 28.6 GB) plus the KV windows.
- mid: the real layer widths (1536 / 5120 DiT, the real VAE, ImageReward's widths) with one DiT layer each and
  two ImageReward layers per tower, at 128x64: the per-layer cost ratio of 14B:1.3B is kept, so the DiT-forward
  cost ratio is ~7 as at full size; finishes in a few minutes on a 2-core CPU.
- tiny: the demo's tiny models (CI smoke test, < 60 s); its JSON has the same keys.

Configurations, interleaved after one warm-up generation: target-only; the reference algorithm (lazy=False) at
6 of 8 accepted; this engine at the same 6 of 8; all-accept; all-reject. Per configuration: seconds per block and
per phase (the engine's BlockRecord.seconds, CUDA-synchronised with EngineConfig.sync_timing), peak device memory
(torch.cuda.max_memory_allocated, reset per configuration), measured speedup over target-only, the counted-work
prediction (each run's counted forwards, decoded and scored frames x per-unit costs pooled over all runs), and the
engine overhead (wall time outside the DiT, VAE and scorer calls).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.demo.tiny import DEMO_PROMPT, random_vae  # noqa: E402
from sdvg_core.demo.vocab import write_synthetic_vocab  # noqa: E402
from sdvg_core.engine.engine import Engine, EngineConfig  # noqa: E402
from sdvg_core.engine.memory import GIB, estimate_for_spec  # noqa: E402
from sdvg_core.engine.policy import FixedPattern, TargetOnly  # noqa: E402
from sdvg_core.engine.recipes import recipe_by_name  # noqa: E402
from sdvg_core.engine.state import GenerationSpec, PromptConditioning  # noqa: E402
from sdvg_core.io.reward_files import count_vocab_lines, random_scorer, read_vocab_bytes  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402
from sdvg_core.models.reward import ImageRewardScorer  # noqa: E402
from sdvg_core.models.reward_config import EXTRA_SPECIAL_TOKENS, IMAGEREWARD_V1, TINY as TINY_REWARD  # noqa: E402
from sdvg_core.models.vae import VAE_PRESETS  # noqa: E402
from sdvg_core.models.wan import CausalWan, build_random, build_random_on  # noqa: E402
from sdvg_core.models.wan_config import PRESETS, WanDiTConfig  # noqa: E402

BLOCKS = 9  # the paper's 9 blocks
# The reference's ~73% acceptance over blocks 1..8 as 6 of 8 (block 0 always comes from the target).
PATTERN_6_OF_8 = (False, True, True, False, True, True, True, False, True)
PHASES = ("context", "draft", "decode", "score", "target")
WORK = ("drafter_forwards", "target_forwards", "drafter_context_forwards", "target_context_forwards",
        "vae_decode_frames", "vae_encodes", "scored_frames")


@dataclass(frozen=True)
class Scale:
    """One benchmark size: the four model shapes and the frame size."""

    drafter: WanDiTConfig
    target: WanDiTConfig
    vae: str  # VAE preset
    reward: Any  # ImageRewardConfig (vocab size set from the synthetic vocabulary)
    width: int
    height: int
    exact_init: bool  # True: build_random on the CPU (tiny, bit-stable); False: meta init on the device


# mid: one layer each keeps the 14B:1.3B per-layer FLOP ratio (~7.2 at these widths, vs 7.4 per forward at full size).
SCALES: dict[str, Scale] = {
    "tiny": Scale(PRESETS["tiny-drafter"], PRESETS["tiny-target"], "tiny", TINY_REWARD, 48, 32, True),
    "mid": Scale(replace(PRESETS["wan2.1-t2v-1.3b"], name="1.3b-widths-1-layer", num_layers=1),
                 replace(PRESETS["wan2.1-t2v-14b"], name="14b-widths-1-layer", num_layers=1),
                 "wan2.1-vae", replace(IMAGEREWARD_V1, name="imagereward-widths-2-layers", vision_layers=2,
                                       text_layers=2), 128, 64, False),
    "full": Scale(PRESETS["wan2.1-t2v-1.3b"], PRESETS["wan2.1-t2v-14b"], "wan2.1-vae", IMAGEREWARD_V1, 832, 480,
                  False),
}


class Stopwatch:
    """Wraps the model-facing callables; seconds and calls per kind (CUDA-synchronised at both ends)."""

    def __init__(self, sync: bool):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.sync = sync

    def wrap(self, obj: Any, name: str, kind: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            if self.sync:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if self.sync:
                    torch.cuda.synchronize()
                self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - t0
                self.calls[kind] = self.calls.get(kind, 0) + 1

        setattr(obj, name, timed)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass
class Models:
    drafter: CausalWan
    target: CausalWan
    vae: Any
    scorer: ImageRewardScorer


def build_models(scale: Scale, device: torch.device, dtype: torch.dtype, compile: bool, workdir: Path) -> Models:
    """Random weights at the real shapes; full-size DiTs are made on the device directly (meta init)."""
    nets = []
    for i, cfg in enumerate((scale.drafter, scale.target)):
        net = build_random(cfg, seed=1 + i).to(device, dtype) if scale.exact_init else \
            build_random_on(cfg, device, dtype, seed=1 + i)
        nets.append(CausalWan(net, cfg, dtype=dtype, device=device, key=f"bench-{cfg.name}-{dtype}", compile=compile))
    vae_dtype = dtype if device.type == "cuda" else torch.float32
    vae = random_vae(3, scale.vae, dtype=vae_dtype).to(device)
    vocab = write_synthetic_vocab(workdir / "vocab.txt")
    reward_cfg = scale.reward.with_vocab(count_vocab_lines(read_vocab_bytes(vocab)) + len(EXTRA_SPECIAL_TOKENS))
    reward_dtype = torch.float16 if device.type == "cuda" else torch.float32  # the loader's default
    scorer = random_scorer(reward_cfg, vocab, seed=4, device=device, dtype=reward_dtype)
    return Models(nets[0], nets[1], vae, scorer)


def counts(state) -> dict[str, int]:
    return {k: int(sum(b.work.get(k, 0) for b in state.blocks)) for k in WORK}


def run_one(models: Models, spec: GenerationSpec, policy, lazy: bool, device: torch.device) -> dict:
    """One generation on a fresh engine (its own empty memo), timing every model-facing call."""
    cuda = device.type == "cuda"
    engine = Engine(models.target, models.vae, models.drafter, models.scorer,
                    EngineConfig(lazy=lazy, sync_timing=cuda))
    sw = Stopwatch(cuda)
    wrapped = ((models.target, "forward", "target_forward"), (models.target, "encode_text", "text"),
               (models.drafter, "forward", "drafter_forward"), (models.drafter, "encode_text", "text"),
               (models.vae, "decode_stream", "decode"), (models.vae, "encode_anchor_frame", "encode"),
               (models.scorer, "score_frames", "score"))
    for obj, name, kind in wrapped:
        sw.wrap(obj, name, kind)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        t0 = time.perf_counter()
        state = engine.generate(spec, policy)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        for obj, name, _ in wrapped:
            if name in vars(obj):
                delattr(obj, name)
    phases = {p: sum(float(b.seconds.get(p, 0.0)) for b in state.blocks) for p in PHASES}
    return {"state": state, "wall": wall, "sw": sw, "phases": phases, "counts": counts(state),
            "peak": torch.cuda.max_memory_allocated() if cuda else None}


def unit_costs(results: dict[str, dict]) -> dict[str, float]:
    """Seconds per unit of counted work, pooled over every timed run (forward, decoded frame, scored frame...)."""
    sec: dict[str, float] = {}
    for r in results.values():
        for k, v in r["sw"].seconds.items():
            sec[k] = sec.get(k, 0.0) + v
    work = {k: sum(r["counts"][k] for r in results.values()) for k in WORK}
    texts = sum(r["sw"].calls.get("text", 0) for r in results.values())
    per = {"drafter_forward": ("drafter_forward", work["drafter_forwards"]),
           "target_forward": ("target_forward", work["target_forwards"]),
           "decode_frame": ("decode", work["vae_decode_frames"]), "encode": ("encode", work["vae_encodes"]),
           "score_frame": ("score", work["scored_frames"]), "text": ("text", texts)}
    return {name: (sec.get(kind, 0.0) / n if n else 0.0) for name, (kind, n) in per.items()}


def predicted_seconds(r: dict, unit: dict[str, float]) -> float:
    """Counted work x unit costs: what the run should take if time were only its counted model work."""
    c = r["counts"]
    return (c["drafter_forwards"] * unit["drafter_forward"] + c["target_forwards"] * unit["target_forward"]
            + c["vae_decode_frames"] * unit["decode_frame"] + c["vae_encodes"] * unit["encode"]
            + c["scored_frames"] * unit["score_frame"] + r["sw"].calls.get("text", 0) * unit["text"])


def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), torch {torch.__version__}"
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"SDVG scale benchmark, size `{meta['size']}` ({meta['width']}x{meta['height']}, {meta['blocks']} blocks, "
             f"{meta['dtype']}) on {meta['machine']}; command: `{meta['command']}`", "",
             "| configuration | D fw | T fw | s/block | context | draft | decode | score | target | peak GiB | "
             "speedup measured | predicted (counted work) | engine overhead |", "|" + "---|" * 13]
    for r in rows:
        p = r["phase_s_per_block"]
        peak = "-" if r["peak_mem_bytes"] is None else f"{r['peak_mem_bytes'] / GIB:.2f}"
        lines.append(f"| {r['name']} | {r['counts']['drafter_forwards']} | {r['counts']['target_forwards']} | "
                     f"{r['s_per_block']:.3f} | " + " | ".join(f"{p[k]:.3f}" for k in PHASES) +
                     f" | {peak} | {r['speedup_measured']:.2f}x | {r['speedup_predicted']:.2f}x | "
                     f"{r['overhead_s']:.3f} s ({r['overhead_share']:.1%}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=tuple(SCALES), default="tiny")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda: bf16; cpu: fp32)")
    ap.add_argument("--json", default=None, help="where to write the JSON (default out/bench/scale-<size>.json)")
    ap.add_argument("--md", default=None, help="where to write the markdown table (default next to the JSON)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds over the configurations")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (0: torch's default; 1 by default: steadier on a shared CPU)")
    ap.add_argument("--compile", action="store_true", help="regional torch.compile of the DiT blocks")
    ap.add_argument("--recipe", default="krea", help="krea or self_forcing")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    scale = SCALES[a.size]
    out_json = Path(a.json or f"out/bench/scale-{a.size}.json")
    out_md = Path(a.md) if a.md else out_json.with_suffix(".md")
    out_json.parent.mkdir(parents=True, exist_ok=True)

    t_build = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sdvg-bench-") as tmp:
        models = build_models(scale, device, dtype, a.compile, Path(tmp))
    build_s = time.perf_counter() - t_build
    weights_bytes = torch.cuda.memory_allocated() if device.type == "cuda" else None
    emb = demo_embeddings(DEMO_PROMPT, scale.target.text_dim)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, emb), scale.width, scale.height, BLOCKS, 42)
    recipe = recipe_by_name(a.recipe)
    if a.recipe != "krea":
        raise SystemExit("only --recipe krea is wired to the engine config here")

    # warm-up: a short generation touching every model and kernel shape, untimed
    t_warm = time.perf_counter()
    run_one(models, replace(spec, num_blocks=3, seed=7), FixedPattern((False, True, False)), True, device)
    warm_s = time.perf_counter() - t_warm
    print(f"size {a.size}: built in {build_s:.1f} s, warm-up {warm_s:.1f} s", flush=True)

    jobs = {"target-only": (TargetOnly(), True),
            "reference algorithm (lazy=False), 6/8": (FixedPattern(PATTERN_6_OF_8), False),
            "this engine, 6/8": (FixedPattern(PATTERN_6_OF_8), True),
            "all-accept": (FixedPattern((False,) + (True,) * (BLOCKS - 1)), True),
            "all-reject": (FixedPattern((False,) * BLOCKS), True)}
    results: dict[str, dict] = {}
    for _ in range(max(a.repeats, 1)):  # interleaved rounds: slow drifts of a shared machine hit all alike
        for name, (policy, lazy) in jobs.items():
            r = run_one(models, spec, policy, lazy, device)
            print(f"  {name}: {r['wall']:.1f} s", flush=True)
            if name not in results or r["wall"] < results[name]["wall"]:
                results[name] = r

    unit = unit_costs(results)
    base = results["target-only"]
    base_pred = predicted_seconds(base, unit)
    rows = []
    for name, r in results.items():
        model_s = r["sw"].total
        rows.append({
            "name": name, "lazy": jobs[name][1], "wall_s": r["wall"], "s_per_block": r["wall"] / BLOCKS,
            "phase_s_per_block": {k: v / BLOCKS for k, v in r["phases"].items()},
            "model_s": model_s, "overhead_s": r["wall"] - model_s, "overhead_share": (r["wall"] - model_s) / r["wall"],
            "peak_mem_bytes": r["peak"], "speedup_measured": base["wall"] / r["wall"],
            "speedup_predicted": base_pred / predicted_seconds(r, unit), "predicted_s": predicted_seconds(r, unit),
            "counts": r["counts"],
            "decisions": [b.decision for b in r["state"].blocks],
        })
    est = estimate_for_spec(spec, recipe, [(scale.target, dtype), (scale.drafter, dtype)],
                            VAE_PRESETS[scale.vae], dtype if device.type == "cuda" else torch.float32)
    meta = {"size": a.size, "device": str(device), "dtype": str(dtype).replace("torch.", ""), "machine": machine(),
            "command": "./dev.sh bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "blocks": BLOCKS, "width": scale.width, "height": scale.height, "recipe": a.recipe, "compile": a.compile,
            "models": {"drafter": dataclasses.asdict(scale.drafter), "target": dataclasses.asdict(scale.target),
                       "vae": scale.vae, "reward": scale.reward.name},
            "params": {"drafter": scale.drafter.num_params(), "target": scale.target.num_params()},
            "build_s": build_s, "warmup_s": warm_s, "weights_resident_bytes": weights_bytes,
            "unit_s": unit, "forward_ratio": (unit["target_forward"] / unit["drafter_forward"]
                                              if unit["drafter_forward"] else None),
            "memory_estimate": {"peak_bytes": est.peak, "describe": est.describe(),
                                "dits": [dataclasses.asdict(d) for d in est.dits],
                                "vae_cache_bytes": est.vae_cache, "vae_activation_bytes": est.vae_activations}}
    table = markdown(rows, meta)
    out_json.write_text(json.dumps({**meta, "rows": rows}, indent=2, default=str))
    out_md.write_text(table)
    print(table)
    print(f"unit costs: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in unit.items()))
    print(f"build {build_s:.1f} s, warm-up {warm_s:.1f} s; wrote {out_json} and {out_md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
