#!/usr/bin/env python3
"""Record the committed regression values in tests/regression/*.json (what tests/test_regression.py compares).

    .venv/bin/python scripts/record_regression.py            # runs the fixture parity tests first, then records
    .venv/bin/python scripts/record_regression.py --probe-uint8   # measure the score tolerance's basis, write nothing

Regression values are only meaningful when recorded from a state verified against the reference: the script runs
the golden-fixture parity tests (golden tensors, docs/design.md §6) first and refuses to write when any fails or is skipped.
`--unverified` records anyway (for a machine without the fixtures) and says so loudly; do not commit such values
without running the parity tests somewhere.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import test_regression as reg  # noqa: E402

# The setups recorded with each case: sizes only. Constants (eps, RoPE theta, latent statistics, schedule shift)
# come from the code's own defaults, so changing one of those is caught as a regression.
DIT_SIZES = {"dim": 64, "ffn_dim": 128, "num_heads": 4, "num_layers": 2, "text_dim": 32}  # 4 heads: head order matters
DIT_GEOMETRY = {"frames_per_block": 3, "blocks": 2, "latent_hw": [4, 6], "text_tokens": 16,
                "timesteps": [937.5, 625.0]}  # the second and fourth Self-Forcing warped steps
VAE_SIZES = {"dim": 8, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
             "temporal_downsample": [False, True, True]}  # the fixture VAE's shape (Wan 2.1 VAE at width 8)
SETUPS: dict[str, dict] = {
    "dit_cached": {"config": DIT_SIZES, "weight_seed": 11, "input_seed": 12, **DIT_GEOMETRY},
    "dit_full_sequence": {"config": DIT_SIZES, "weight_seed": 11, "input_seed": 12, **DIT_GEOMETRY},
    "vae": {"config": VAE_SIZES, "weight_seed": 21, "input_seed": 22, "latent_hw": [2, 3], "latent_frames": 4,
            "chunks": [1, 3]},
    "imagereward": {"weight_seed": 31, "input_seed": 32, "frames": 3, "frame_hw": [36, 64],
                    "prompt": "a corgi runs on the beach"},
    "krea_engine": {"weight_seed": 41, "noise_seed": 42, "size_wh": [48, 32], "decisions": [False, True, False],
                    "expected_decisions": ["forced", "accepted", "rejected"],
                    "prompt": "a corgi runs on the beach"},
}
# The golden-fixture parity tests that verify the state the values are recorded from.
PARITY_TESTS = ["tests/test_wan.py", "tests/test_vae.py", "tests/test_reward.py", "tests/test_schedule.py",
                "tests/test_engine.py"]
# --probe-uint8: fractions of pixel values moved by one uint8 level (float rounding flips far fewer), trials each.
UINT8_PROBE_FRACTIONS = (0.001, 0.01)
UINT8_PROBE_TRIALS = 8
PARITY_SELECTION = "reference or fixture or parity or anchor or bit_for_bit or warped"


def parity_tests_pass() -> bool:
    """Run the fixture parity tests; True only when all selected ran and passed (none skipped)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-k", PARITY_SELECTION,
           *PARITY_TESTS]
    print("verifying against the golden fixtures:", " ".join(cmd[2:]))
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    print("  " + tail)
    return run.returncode == 0 and "skipped" not in tail


def setup_for(case: str) -> dict:
    """The setup stored with a case (the ImageReward config it runs with is recorded too, to tell setup changes)."""
    setup = json.loads(json.dumps(SETUPS[case]))
    if case == "imagereward":
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            _, cfg = reg._scorer(setup, Path(d))
        setup["scorer_config"] = reg._jsonable(asdict(cfg))
    return setup


def probe_uint8() -> None:
    """How much one uint8 level flipped in the input frames moves the tiny ImageReward's scores (SCORE_ATOL)."""
    import tempfile

    setup = setup_for("imagereward")
    with tempfile.TemporaryDirectory() as d:
        scorer, _ = reg._scorer(setup, Path(d))
        gen = torch.Generator().manual_seed(setup["input_seed"])
        h, w = setup["frame_hw"]
        frames = torch.rand(setup["frames"], h, w, 3, generator=gen)  # [F, H, W, 3]
        base = scorer.score_frames(frames, setup["prompt"])
        worst = {}
        for fraction in UINT8_PROBE_FRACTIONS:
            worst[fraction] = 0.0
            for _ in range(UINT8_PROBE_TRIALS):
                flip = torch.rand(frames.shape, generator=gen) < fraction
                sign = torch.where(torch.rand(frames.shape, generator=gen) < 0.5, -1.0, 1.0)
                moved = (frames + flip * sign / 255).clamp(0, 1)  # one uint8 level up or down
                change = (scorer.score_frames(moved, setup["prompt"]) - base).abs().max().item()
                worst[fraction] = max(worst[fraction], change)
    for fraction, change in worst.items():
        print(f"one uint8 level on {fraction:.1%} of the pixel values moves the scores by at most {change:.2e}")
    print(f"(SCORE_ATOL = {reg.SCORE_ATOL:.0e}; scores ~{base.abs().max().item():.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unverified", action="store_true", help="record without passing fixture parity tests (warns)")
    ap.add_argument("--probe-uint8", action="store_true", help="measure the score tolerance's basis and exit")
    ap.add_argument("--cases", nargs="*", default=list(reg.CASES), help="cases to record (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as the tests (and the fixtures)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.probe_uint8:
        probe_uint8()
        return 0
    if not parity_tests_pass():
        if not args.unverified:
            print("REFUSED: the golden-fixture parity tests did not all run and pass; regression values must be "
                  "recorded from a state verified against the reference (use --unverified to override).")
            return 1
        print("WARNING: recording UNVERIFIED values (parity tests failed or skipped). Do not commit them before the "
              "parity tests pass on this code.")
    reg.REGRESSION_DIR.mkdir(exist_ok=True)
    for case in args.cases:
        setup = setup_for(case)
        outputs = reg.CASES[case](setup)
        record = {
            "about": f"regression values of tests/test_regression.py::{case}; written by scripts/record_regression.py "
                     f"({'UNVERIFIED' if args.unverified else 'fixture parity tests passed'})",
            "torch": torch.__version__,
            "setup": setup,
            "outputs": {name: reg.summarize(t) for name, t in sorted(outputs.items())},
        }
        path = reg.REGRESSION_DIR / f"{case}.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}: {', '.join(sorted(outputs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
