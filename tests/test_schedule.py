"""Flow-matching schedule against the golden schedule tensors (docs/design.md §6) and the causal fixture's tables."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.engine.schedule import FlowMatchSchedule, add_noise, flow_to_x0, krea_plan, self_forcing_plan


def _hex(x: float) -> str:
    return struct.pack(">f", x).hex()


def test_tables_match_reference_bit_for_bit(fixtures_dir):
    T = load_file(fixtures_dir / "causal_wan_tiny" / "tensors.safetensors")
    t, s = FlowMatchSchedule().table
    assert torch.equal(t, T["scheduler_timesteps"]) and torch.equal(s, T["scheduler_sigmas"])


def test_warped_steps_and_sigmas(fixtures_dir):
    ref = json.loads((fixtures_dir / "schedule.json").read_text())
    sf = self_forcing_plan()
    assert [_hex(t) for t in sf.timesteps] == [e["t_float32_hex"] for e in ref["self_forcing"]["warped_steps"]]
    assert [_hex(s) for s in sf.sigmas] == [e["sigma_float32_hex"] for e in ref["self_forcing"]["warped_steps"]]
    assert sf.commit_clean
    for key in ("server_schedule_default_5_steps", "server_schedule_4_steps"):
        entries = ref["krea_realtime_14b"][key]["steps"]
        plan = krea_plan(len(entries))
        assert [_hex(t) for t in plan.timesteps] == [e["t_float32_hex"] for e in entries]
        assert [_hex(s) for s in plan.sigmas] == [e["sigma_float32_hex"] for e in entries]
        assert not plan.commit_clean


def test_nominal_to_warped_without_fixture():
    assert self_forcing_plan().timesteps == pytest.approx((1000.0, 937.5, 833.3333, 625.0), abs=1e-4)
    assert krea_plan().sigmas[-1] == pytest.approx(0.00498, abs=1e-5)  # t=0 maps to the last table entry


def test_x0_and_renoise_round_trip():
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 4, generator=g)
    sigma = 0.8333333
    xt = add_noise(x0, eps, sigma)
    assert torch.allclose(flow_to_x0(xt, eps - x0, sigma), x0, atol=1e-6)
    assert flow_to_x0(xt.half(), (eps - x0).half(), sigma).dtype == torch.float16
