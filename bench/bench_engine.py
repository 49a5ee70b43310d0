"""Engine benchmark on CPU: wall-clock speedup over target-only at fixed decision patterns vs the
counted-work prediction, and the engine's own overhead. Not a test; run `./dev.sh bench`.

The drafter and target are random Wan DiTs sized so one target forward costs ~7.4 drafter forwards
(the 1.3B:14B ratio at 832x480, docs/design.md §5); the VAE and ImageReward are the tiny random ones. Every
pattern runs on a fresh engine (empty memo), after one untimed warm-up run; the fastest of 5 interleaved repeats counts (single runs vary by about 8% on a shared 2-core VM). The
prediction multiplies each run's counted work (forwards, decoded blocks, anchor encodes, scored blocks)
by per-call costs pooled over all timed runs; the DiT-forwards-only prediction is shown beside it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core.models.wan_config import WanDiTConfig  # noqa: E402
from sdvg_core.engine.config import EngineConfig  # noqa: E402
from sdvg_core.engine.engine import Engine  # noqa: E402
from sdvg_core.engine.policy import DEFAULT_STRIDE_K, FixedPattern  # noqa: E402
from sdvg_core.engine.policy_names import policy_by_name  # noqa: E402
from sdvg_core.engine.report import build_report, compiled_line, compiled_models, reference_forwards  # noqa: E402
from sdvg_core.engine.state import GenerationSpec, PromptConditioning  # noqa: E402
from sdvg_core.demo.cli_args import add_compile_arg  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402
from sdvg_core.demo.tiny import DEMO_PROMPT, random_vae, tiny_scorer  # noqa: E402
from sdvg_core.models.wan import CausalWan, build_random  # noqa: E402

# Sized on this 2-core CPU (1 thread) so a target forward costs ~7.4 drafter forwards at 48x32.
BENCH_DRAFTER = WanDiTConfig(name="bench-drafter", dim=384, ffn_dim=1536, num_heads=12, num_layers=4, text_dim=32)
BENCH_TARGET = WanDiTConfig(name="bench-target", dim=768, ffn_dim=3072, num_heads=24, num_layers=10, text_dim=32)
SIZE = (48, 32)  # pixels; latent 6x4, 6 tokens per latent frame
BLOCKS = 9  # the paper's 9 blocks
# Decision patterns over 9 blocks (True = keep the draft). The reference's ~73% over blocks 1-8 is 6 of 8.
PATTERNS = {
    "all-accept": (False,) + (True,) * 8,
    "reference ~73% (6/8)": (False, True, True, False, True, True, True, False, True),
    "all-reject": (False,) * 9,
}
STRIDE_K = DEFAULT_STRIDE_K  # the StrideAR baseline's row: the target makes blocks 0, 2, 4, ... (no scorer)


class Stopwatch:
    """Wraps the model-facing callables of an engine; seconds and calls per category."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def wrap(self, obj, name: str, category: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[category] = self.seconds.get(category, 0.0) + time.perf_counter() - t0
                self.calls[category] = self.calls.get(category, 0) + 1

        setattr(obj, name, timed)


@dataclass
class Models:
    drafter: CausalWan
    target: CausalWan
    vae: object
    scorer: object


def unit_costs_ms(sw: Stopwatch) -> dict[str, float]:
    """Mean ms per call of each kind of model work recorded by a stopwatch."""
    return {k: sw.seconds[k] / sw.calls[k] * 1000 for k in sw.seconds}


def predicted_seconds(rep, unit: dict[str, float], frames_per_block: int = 3) -> float:
    """Counted work -> seconds: the report's forwards, decoded blocks, anchor encodes, scored blocks and the
    per-prompt text K/V of each model used, each at its unit cost."""
    decoded_blocks = sum(b.work["vae_decode_frames"] for b in rep.blocks) / frames_per_block
    scored_blocks = sum(1 for b in rep.blocks if b.work["scored_frames"] > 0)
    encodes = sum(b.work["vae_encodes"] for b in rep.blocks)
    text_encodes = (rep.drafter_forwards > 0) + (rep.target_forwards > 0)
    ms = (text_encodes * unit["text"] + rep.drafter_forwards * unit["drafter_forward"] + rep.target_forwards * unit["target_forward"]
          + decoded_blocks * unit["decode_block"] + encodes * unit["encode_anchor"] + scored_blocks * unit["score_block"])
    return ms / 1000


def run(models: Models, spec: GenerationSpec, policy, lazy: bool = True) -> dict:
    """One generation on a fresh engine (empty memo), timing each kind of model call."""
    engine = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(lazy=lazy))
    sw = Stopwatch()
    for role, dit in (("target", models.target), ("drafter", models.drafter)):
        sw.wrap(dit, "forward", f"{role}_forward")
        sw.wrap(dit, "encode_text", "text")
    sw.wrap(models.vae, "decode_stream", "decode_block")
    sw.wrap(models.vae, "encode_anchor_frame", "encode_anchor")
    sw.wrap(models.scorer, "score_frames", "score_block")
    try:
        t0 = time.perf_counter()
        state = engine.generate(spec, policy)
        wall = time.perf_counter() - t0
    finally:
        for obj, names in ((models.target, ("forward", "encode_text")), (models.drafter, ("forward", "encode_text")),
                           (models.vae, ("decode_stream", "encode_anchor_frame")), (models.scorer, ("score_frames",))):
            for n in names:
                delattr(obj, n)
    return {"state": state, "engine": engine, "wall": wall, "model_seconds": sw.total, "stopwatch": sw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="runs per pattern (interleaved); the fastest counts")
    add_compile_arg(ap)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    d = CausalWan(build_random(BENCH_DRAFTER, seed=1), BENCH_DRAFTER, key="bench-drafter", compile=a.compile)
    t = CausalWan(build_random(BENCH_TARGET, seed=2), BENCH_TARGET, key="bench-target", compile=a.compile)
    models = Models(d, t, random_vae(3), tiny_scorer(4, out / "vocab"))

    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), SIZE[0], SIZE[1], BLOCKS, 42)
    # warm-up (allocator, first calls), on another seed, untimed
    run(models, GenerationSpec(spec.prompt, SIZE[0], SIZE[1], BLOCKS, seed=7), FixedPattern(PATTERNS["reference ~73% (6/8)"]))

    ref_name = "reference algorithm, ~73% (6/8)"
    jobs = {"target-only": (policy_by_name("target-only"), True)}
    jobs.update({name: (FixedPattern(pattern), True) for name, pattern in PATTERNS.items()})
    jobs[f"StrideAR k={STRIDE_K} (no scorer)"] = (policy_by_name(f"stride:k={STRIDE_K}"), True)
    jobs[ref_name] = (FixedPattern(PATTERNS["reference ~73% (6/8)"]), False)  # last: checked against the reference
    # repeats are interleaved (round-robin over the patterns) so slow drifts of a shared machine hit all alike
    results: dict[str, dict] = {}
    for _ in range(a.repeats):
        for name, (policy, lazy) in jobs.items():
            res = run(models, spec, policy, lazy=lazy)
            if name not in results or res["wall"] < results[name]["wall"]:
                results[name] = res

    # Unit costs: mean ms per call of each kind, pooled over the timed runs (5 parameters for 5 runs with
    # very different mixes of work); counts x unit costs is the prediction each run's wall time is checked against.
    pooled = Stopwatch()
    for res in results.values():
        for k, v in res["stopwatch"].seconds.items():
            pooled.seconds[k] = pooled.seconds.get(k, 0.0) + v
            pooled.calls[k] = pooled.calls.get(k, 0) + res["stopwatch"].calls[k]
    unit = unit_costs_ms(pooled)
    print("unit costs: " + ", ".join(f"{k} {v:.1f} ms" for k, v in unit.items()))
    d_ms, t_ms = unit["drafter_forward"], unit["target_forward"]
    ratio = t_ms / d_ms
    print(f"per-forward: drafter {d_ms:.1f} ms, target {t_ms:.1f} ms -> measured ratio 1:{ratio:.2f} (goal 1:7.4)")

    base = results["target-only"]
    steps = base["engine"].recipe.plan.num_steps
    base_rep = build_report(base["state"], "target-only", base["engine"].recipe, steps, cost_ratio=ratio)
    base_pred = predicted_seconds(base_rep, unit)
    rows = []
    for name, res in results.items():
        rep = build_report(res["state"], name, res["engine"].recipe, steps, cost_ratio=ratio)
        r = {
            "pattern": name,
            "wall_s": res["wall"],
            "speedup_measured": base["wall"] / res["wall"],
            "speedup_counted": base_rep.counted_cost / rep.counted_cost,
            "speedup_counted_full": base_pred / predicted_seconds(rep, unit),
            "wall_predicted_s": predicted_seconds(rep, unit),
            "speedup_counted_nominal_7.4": (7.4 * base_rep.target_forwards) / (rep.drafter_forwards + 7.4 * rep.target_forwards),
            "drafter_forwards": rep.drafter_forwards,
            "target_forwards": rep.target_forwards,
            "overhead_share": (res["wall"] - res["model_seconds"]) / res["wall"],
            "acceptance_1_to_n": rep.acceptance_blocks_1_to_n,
        }
        r["prediction_error"] = r["speedup_measured"] / r["speedup_counted_full"] - 1
        rows.append(r)
    rejected = [not x for x in PATTERNS["reference ~73% (6/8)"]]
    assert (rows[-1]["drafter_forwards"], rows[-1]["target_forwards"]) == reference_forwards(base["engine"].recipe, rejected, steps)

    header = ("| pattern | accept 1..8 | D fw | T fw | wall s (predicted) | speedup measured | counted: all work | error | "
              "counted: forwards only | forwards @1:7.4 | engine overhead |")
    lines = [header, "|" + "---|" * 11]
    for r in rows:
        acc = "-" if r["acceptance_1_to_n"] is None else f"{r['acceptance_1_to_n']:.0%}"
        lines.append(f"| {r['pattern']} | {acc} | {r['drafter_forwards']} | {r['target_forwards']} | "
                     f"{r['wall_s']:.2f} ({r['wall_predicted_s']:.2f}) | {r['speedup_measured']:.2f}x | "
                     f"{r['speedup_counted_full']:.2f}x | {r['prediction_error']:+.1%} | {r['speedup_counted']:.2f}x | "
                     f"{r['speedup_counted_nominal_7.4']:.2f}x | {r['overhead_share']:.2%} |")
    lines.append("\n" + compiled_line(compiled_models(t, d)))
    table = "\n".join(lines)
    print(table)
    (out / "bench.json").write_text(json.dumps({"drafter_ms": d_ms, "target_ms": t_ms, "ratio": ratio, "unit_ms": unit,
                                                "compiled": bool(a.compile), "compiled_models": compiled_models(t, d),
                                                "rows": rows},
                                               indent=2))
    (out / "bench.md").write_text(table + "\n")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
