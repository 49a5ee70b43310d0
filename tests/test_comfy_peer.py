"""The pack's CausalWan vs ComfyUI's own WanModel.forward, side by side (skipped unless COMFYUI_DIR is set).

    COMFYUI_DIR=/path/to/ComfyUI [COMFYUI_PYTHON=...] [SDVG_PEER_DEVICE=cuda] .venv/bin/python -m pytest -q -s \
        tests/test_comfy_peer.py

Runs tests/comfy_peer_probe.py with ComfyUI's python (real 1.3B widths, 2 layers, one 3-frame block, empty cache,
fp32 and bf16) and prints its figures: maximum difference and time ratio pack / ComfyUI.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
pytestmark = pytest.mark.skipif(not COMFYUI_DIR, reason="set COMFYUI_DIR to a ComfyUI checkout to run real-host tests")
REPO = Path(__file__).resolve().parents[1]
# fp32: two float32 implementations of the same network differ by rounding only (fixtures README §5: <= 1e-4).
FP32_TOL = 1e-4
# bf16: both round every layer's input to bf16 (8 mantissa bits); relative to the output scale.
BF16_REL_TOL = 5e-2
# Goal: no slower than ComfyUI's own forward (issue 9). A shared 2-core CPU varies by ~10-20% run to run, so the
# test fails only beyond that noise; the printed figure is the one to report.
RATIO_LIMIT = 1.25


def _python() -> str:
    return os.environ.get("COMFYUI_PYTHON") or str(Path(COMFYUI_DIR) / ".venv" / "bin" / "python")


def test_pack_forward_matches_and_keeps_pace_with_comfy():
    device = os.environ.get("SDVG_PEER_DEVICE", "cpu")
    res = subprocess.run([_python(), str(REPO / "tests" / "comfy_peer_probe.py"), COMFYUI_DIR, str(REPO),
                          "--device", device], capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    fig = json.loads(res.stdout.strip().splitlines()[-1])
    print("\npeer figures:", json.dumps(fig, indent=1))
    assert fig["fp32_max_diff"] <= FP32_TOL
    assert fig["bf16_max_diff"] <= BF16_REL_TOL * fig["bf16_scale"]
    assert fig["fp32_time_ratio"] <= RATIO_LIMIT
    assert fig["bf16_time_ratio"] <= RATIO_LIMIT
