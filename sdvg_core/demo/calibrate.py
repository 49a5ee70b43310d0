"""Calibrate a tiny routing decoder against the full VAE: the same drafts decoded by both and scored twice.

    python -m sdvg_core.demo.calibrate                                  # tiny random models, the embedded tiny TAEHV
    python -m sdvg_core.demo.calibrate --route-vae taew2_1.safetensors --drafter self_forcing_dmd.pt \\
        --target krea-realtime-video-14b.safetensors --vae Wan2.1_VAE.pth --reward ImageReward.pt \\
        --umt5 umt5-xxl/ --prompts prompts.txt --num-prompts 20 --seeds 42 --device cuda

For every (prompt, seed) the run follows the full VAE's decisions at --tau (what a run with the full VAE would
commit); each draft it scores is also decoded by --route-vae from that decoder's own memory of the committed blocks
and scored (sdvg_core/engine/calibration_run.py). Writes calibration.json (every paired score, and per tau in --taus:
decision agreement at the same tau, the tau on the tiny decoder's scale that gives the full VAE's acceptance and the
agreement there; Pearson and Spearman correlation; each decoder's routing cost per block, decode + score) and
calibration.png (the scatter). With the tiny random models the numbers exercise the code and say nothing about real
weights.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..derived.memo import TieredMemo
from ..engine.calibration import calibrate
from ..engine.calibration_plot import render_calibration_plot
from ..engine.calibration_run import PairedBlock, paired_scores
from ..engine.engine import Engine
from ..engine.noise import noise_source
from ..engine.route_decoder import WAN_VAE
from ..engine.state import GenerationSpec, PromptConditioning, PromptSchedule
from ..io.checkpoint import CheckpointError
from ..io.text import UMT5Encoder, demo_embeddings
from ..models.dtypes import DTYPES
from .cli import _prompt, _real_models, build_parser
from .cli_args import REAL_BLOCKS, REAL_SIZE, TINY_BLOCKS, TINY_SIZE, USAGE_ERROR, run_engine_config, run_policy
from .outputs import dated_folder
from .preflight import MODEL_FLAGS, preflight
from .route_args import TINY_ROUTE, load_route_vae
from .tiny import DEMO_PROMPT, tiny_models

DEFAULT_ROOT = Path("out/calibration")
CALIBRATION_JSON, CALIBRATION_PNG = "calibration.json", "calibration.png"
# Reference taus reported: the paper's two (-0.7, -1.5) and their neighbourhood; the tiny random ImageReward's
# scores sit near its demo tau (-0.8), so the tiny default looks there.
REAL_TAUS = (-1.5, -1.0, -0.7, -0.5, -0.3, 0.0)
TINY_TAUS = (-1.0, -0.9, -0.8, -0.7, -0.6)
# The tiny default's prompts (three, so the scatter has points from more than one history) and seeds.
TINY_PROMPTS = (DEMO_PROMPT, "a red fox walks through fresh snow at dawn", "waves break on a rocky shore, aerial view")
DEFAULT_SEEDS = "42"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser("python -m sdvg_core.demo.calibrate", __doc__)
    p.add_argument("--prompts", metavar="FILE", help="prompts, one per line (real models: each encoded with --umt5); "
                                                     "default: --prompt, or three built-in prompts for the tiny models")
    p.add_argument("--num-prompts", type=int, default=None, help="use the first N prompts of --prompts")
    p.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"comma-separated seeds (default {DEFAULT_SEEDS})")
    p.add_argument("--taus", default=None,
                   help="comma-separated reference taus to report (default "
                        f"{','.join(map(str, REAL_TAUS))}; tiny {','.join(map(str, TINY_TAUS))})")
    a = p.parse_args(argv)
    a.seed_list = [int(s) for s in str(a.seeds).split(",") if s.strip()]
    a.command = "python -m sdvg_core.demo.calibrate " + " ".join(sys.argv[1:] if argv is None else argv)
    return a


def _problems(a: argparse.Namespace, real: bool, out: Path) -> list[str]:
    problems = preflight(a, real, out)
    if not a.route_vae and real:
        problems.append("--route-vae FILE is missing: the tiny decoder to calibrate (taew2_1 / lighttaew2_1)")
    if a.prompts and not Path(a.prompts).is_file():
        problems.append(f"--prompts {a.prompts}: file not found")
    if real and a.prompts and not a.umt5:
        problems.append("--prompts with real models needs --umt5 (a local umT5 folder) to encode each prompt")
    if not a.seed_list:
        problems.append("--seeds: give at least one seed")
    try:
        _taus(a, real)
    except ValueError:
        problems.append(f"--taus {a.taus}: give comma-separated numbers")
    return problems


def _taus(a: argparse.Namespace, real: bool) -> list[float]:
    if a.taus:
        return [float(t) for t in a.taus.split(",") if t.strip()]
    return list(REAL_TAUS if real else TINY_TAUS)


def _prompts(a: argparse.Namespace, text_dim: int, real: bool) -> list[PromptConditioning]:
    """The prompts' conditioning: the --prompts file's lines, else --prompt (or --embeddings), else the built-ins."""
    if a.prompts:
        lines = [ln.strip() for ln in Path(a.prompts).read_text(encoding="utf-8").splitlines() if ln.strip()]
        lines = lines[:a.num_prompts] if a.num_prompts else lines
        if real:
            encode = UMT5Encoder(a.umt5, device=a.device)
            return [PromptConditioning.make(t, encode(t)) for t in lines]
        return [PromptConditioning.make(t, demo_embeddings(t, text_dim)) for t in lines]
    if real or a.prompt or a.embeddings:
        return [_prompt(a, text_dim, real)]
    return [PromptConditioning.make(t, demo_embeddings(t, text_dim)) for t in TINY_PROMPTS]


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


def overhead(blocks: list[PairedBlock]) -> dict[str, dict[str, float]]:
    """Median routing cost per drafted block with each decoder: its decode of the draft, the scoring, the sum."""
    def med(xs):
        return statistics.median(xs) if xs else 0.0
    ref_d, cand_d = med([b.reference_decode_s for b in blocks]), med([b.candidate_decode_s for b in blocks])
    ref_s, cand_s = med([b.reference_score_s for b in blocks]), med([b.candidate_score_s for b in blocks])
    return {"reference": {"decode_s": ref_d, "score_s": ref_s, "total_s": ref_d + ref_s},
            "candidate": {"decode_s": cand_d, "score_s": cand_s, "total_s": cand_d + cand_s}}


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    except ValueError as e:  # --seeds not integers
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    real = any(getattr(a, k) for k in MODEL_FLAGS)
    if not real and not a.route_vae:
        a.route_vae = TINY_ROUTE
    out = Path(a.out) if a.out else dated_folder(DEFAULT_ROOT)
    problems = _problems(a, real, out)
    if problems:
        print(f"error: {len(problems)} problem(s) with the arguments; nothing was loaded:\n  - " + "\n  - ".join(problems),
              file=sys.stderr)
        return USAGE_ERROR
    try:
        return run(a, real, out)
    except (CheckpointError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR


def run(a: argparse.Namespace, real: bool, out: Path) -> int:
    dtype = DTYPES[a.dtype] if a.dtype else (torch.bfloat16 if a.device != "cpu" else torch.float32)
    if real:
        drafter, target, vae, scorer = _real_models(a, dtype)
        size, blocks = REAL_SIZE, REAL_BLOCKS
    else:
        torch.set_num_threads(1)
        m = tiny_models(seed=0, compile=a.compile)
        drafter, target, vae, scorer = m.drafter, m.target, m.vae, m.scorer
        size, blocks = TINY_SIZE, TINY_BLOCKS
    route_vae = load_route_vae(a, a.device)
    width, height = a.width or size[0], a.height or size[1]
    policy = run_policy(a, real)
    tau = getattr(policy, "tau", None)
    taus = _taus(a, real)
    config = run_engine_config(a, real)
    runs, paired = [], []
    t0 = time.perf_counter()
    for prompt in _prompts(a, target.cfg.text_dim, real):
        for seed in a.seed_list:
            spec = GenerationSpec(PromptSchedule.one(prompt), width, height, a.blocks or blocks, seed)
            noise = noise_source(a.noise, spec, target.cfg.in_dim, config.num_renoise, a.device)
            memo = TieredMemo.split(int(a.memo_gb * 2**30))
            ref = Engine(target, vae, drafter, scorer, config, noise_fn=noise, memo=memo)
            cand = Engine(target, vae, drafter, scorer, config, noise_fn=noise, memo=memo, route_vae=route_vae)
            _, blocks_here = paired_scores(ref, cand, spec, policy)
            runs.append({"prompt": prompt.text, "seed": seed, "blocks": [b.as_dict() for b in blocks_here]})
            paired += blocks_here
            if not a.quiet:
                print(f"{prompt.text[:50]!r} seed {seed}: {len(blocks_here)} draft(s) scored twice", file=sys.stderr)
    if not paired:
        print("error: no draft was scored (every block forced?): nothing to calibrate", file=sys.stderr)
        return USAGE_ERROR
    reference, candidate = [b.reference for b in paired], [b.candidate for b in paired]
    cal = calibrate(reference, candidate, taus)
    name = cand.route_decoder
    doc = {
        "command": a.command,
        "models": "real" if real else "tiny random (embedded default): exercises the code, says nothing about real "
                                      "weights",
        "machine": machine(), "commit": git_commit(), "device": a.device,
        "reference_decoder": WAN_VAE, "candidate_decoder": name, "size": f"{width}x{height}",
        "policy": policy.describe(), "tau": tau, "aggregation": getattr(policy, "aggregation", "min"),
        "blocks": len(paired), "seconds": time.perf_counter() - t0,
        "calibration": {**cal.as_dict(), "reference": list(cal.reference), "candidate": list(cal.candidate)},
        "matched_tau_at_run_tau": None if tau is None else next(
            (t.matched_tau for t in calibrate(reference, candidate, [tau]).taus), None),
        "overhead_per_block": overhead(paired), "runs": runs,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / CALIBRATION_JSON).write_text(json.dumps(doc, indent=1))
    render_calibration_plot(reference, candidate, tau, labels=("full Wan VAE", name)).save(out / CALIBRATION_PNG)
    print(summary(doc))
    print(f"wrote {out / CALIBRATION_JSON} and {out / CALIBRATION_PNG}")
    return 0


def summary(doc: dict) -> str:
    """The table the command prints: per tau, acceptance on both scales, agreement, the matched tau."""
    c = doc["calibration"]
    corr = lambda v: "-" if v is None else f"{v:+.3f}"  # noqa: E731
    o = doc["overhead_per_block"]
    lines = [f"{doc['blocks']} drafts scored through {doc['reference_decoder']} and {doc['candidate_decoder']} "
             f"({doc['models']}); Pearson {corr(c['pearson'])}, Spearman {corr(c['spearman'])}",
             f"routing cost per drafted block (median decode + score): {doc['reference_decoder']} "
             f"{o['reference']['total_s'] * 1e3:.1f} ms ({o['reference']['decode_s'] * 1e3:.1f} + "
             f"{o['reference']['score_s'] * 1e3:.1f}), {doc['candidate_decoder']} {o['candidate']['total_s'] * 1e3:.1f} ms "
             f"({o['candidate']['decode_s'] * 1e3:.1f} + {o['candidate']['score_s'] * 1e3:.1f})",
             f"{'tau':>7} {'accept VAE':>10} {'accept tiny':>11} {'agree':>6} {'matched tau':>11} {'agree there':>11}"]
    for t in c["taus"]:
        lines.append(f"{t['tau']:>7.3f} {t['reference_acceptance']:>10.1%} {t['candidate_acceptance']:>11.1%} "
                     f"{t['agreement']:>6.1%} {t['matched_tau']:>11.4f} {t['matched_agreement']:>11.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
