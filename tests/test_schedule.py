"""Flow-matching schedule against the golden schedule tensors (docs/design.md §6) and the causal fixture's tables."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.sampling.timesteps import (FlowMatchSchedule, add_noise, check_strength, flow_to_x0, input_noise_level,
                                       krea_plan, krea_strength_plan, noise_input, self_forcing_plan,
                                       self_forcing_strength_plan)


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


# ------------------------------------------------------------------------------------------- video-to-video plans
def _pixels_meta(fixtures_dir) -> dict:
    return json.loads((fixtures_dir / "pixels_tiny" / "meta.json").read_text())


def test_krea_strength_plan_matches_the_reference_schedules(fixtures_dir):
    krea = _pixels_meta(fixtures_dir)["krea"]
    for run in ("v2v_s070", "v2v_s050", "krea_start_frame"):
        plan = krea_strength_plan(krea[run]["strength"])
        assert list(plan.timesteps) == krea[run]["denoising_step_list"]  # float32 values, exactly
        assert not plan.commit_clean and plan.num_steps == 5
    assert krea_strength_plan(1.0) == krea_plan()  # strength 1 is the text-to-video plan
    assert krea_strength_plan(0.7).name != krea_strength_plan(0.5).name != krea_plan().name  # distinct memo identities


def test_input_noise_level_is_t0_over_1000_not_the_strength(fixtures_dir):
    T = load_file(fixtures_dir / "pixels_tiny" / "tensors.safetensors")
    for run, a in (("v2v_s070", 0.9210526), ("v2v_s050", 0.8333333)):
        plan = krea_strength_plan(_pixels_meta(fixtures_dir)["krea"][run]["strength"])
        assert input_noise_level(plan).item() == pytest.approx(a, abs=1e-7)
        latents = T[f"{run}/encode0/latent"].permute(0, 2, 1, 3, 4)  # B C F H W -> B F C H W
        assert torch.equal(noise_input(latents, T[f"{run}/draw1"], plan), T[f"{run}/session_noise"])  # bit for bit


def test_self_forcing_strength_plan_starts_at_the_first_step_not_noisier_than_asked():
    sf = self_forcing_plan()
    assert self_forcing_strength_plan(1.0) == sf
    assert self_forcing_strength_plan(0.75).timesteps == sf.timesteps[1:]  # 937.5: exactly Krea's t0 at 0.75
    assert self_forcing_strength_plan(0.7).timesteps == sf.timesteps[2:]  # Krea's t0 at 0.7 is 921: 833.3 <= it
    krea_t0 = krea_strength_plan(0.5).timesteps[0]
    assert self_forcing_strength_plan(0.5).timesteps == sf.timesteps[2:] == (krea_t0, 625.0)
    assert self_forcing_strength_plan(0.25).timesteps == (625.0,)
    assert all(self_forcing_strength_plan(s).commit_clean for s in (1.0, 0.5, 0.25))
    for s in (0.9, 0.75, 0.5, 0.3):  # never noisier than the strength's own first timestep
        assert self_forcing_strength_plan(s).timesteps[0] <= krea_strength_plan(s).timesteps[0]
    assert self_forcing_strength_plan(0.8) == self_forcing_strength_plan(0.76)  # same steps, same plan
    with pytest.raises(ValueError, match="at least 0.25"):
        self_forcing_strength_plan(0.2)


def test_strength_outside_0_1_is_refused():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            check_strength(bad)
        with pytest.raises(ValueError, match="between 0 and 1"):
            krea_strength_plan(bad)
    assert krea_strength_plan(0.0).timesteps == (0.0,) * 5  # Krea at 0: five calls at t = 0 on the clean input
