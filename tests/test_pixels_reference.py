"""Every pixels_tiny run reproduced at the model-call level by tests/pixels_reference.py (the pack's CausalWan, KV
cache, schedule, VAE encoder and decoder, fed the stored draws): each call's input, x0 (and flow where stored), its
timestep, RoPE frames and KV slots as meta.json records them, the encodes, and the outputs. Run with -s for the diffs.
"""
from __future__ import annotations

import pytest
import torch

from pixels_reference import KREA_RUNS, SF_RUNS, PixelsFixture, RunResult, load_fixture, run

TOL = 1e-4  # fixtures README §5: honest float32 implementations land at 1e-6..1e-5; real bugs are >= 1.7e-3


@pytest.fixture(scope="module")
def fx() -> PixelsFixture:
    from conftest import require_shared

    return load_fixture(require_shared("fixtures"))


@pytest.fixture(scope="module")
def results(fx) -> dict[str, RunResult]:
    return {}


def _run(fx: PixelsFixture, results: dict, name: str) -> RunResult:
    if name not in results:
        results[name] = run(fx, name)
    return results[name]


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float().reshape(a.shape)).abs().max().item()


def _meta_calls(fx: PixelsFixture, name: str) -> list[dict]:
    return (fx.meta["self_forcing"] if name in SF_RUNS else fx.meta["krea"])[name]["calls"]


def _check_calls(fx: PixelsFixture, name: str, r: RunResult) -> dict[str, float]:
    """Every call against the stored tensors and meta.json's per-call table; returns the worst diff per quantity."""
    T, table = fx.T, _meta_calls(fx, name)
    assert len(r.calls) == len(table), f"{name}: {len(r.calls)} calls, the reference made {len(table)}"
    worst = {"model_input": 0.0, "x0_pred": 0.0}
    for i, (c, m) in enumerate(zip(r.calls, table)):
        key = f"{name}/call{i:02d}"
        worst["model_input"] = max(worst["model_input"], _diff(c.model_input, T[f"{key}/model_input"]))
        worst["x0_pred"] = max(worst["x0_pred"], _diff(c.x0, T[f"{key}/x0_pred"]))
        if f"{key}/flow_pred" in T:  # SF runs store the raw output; Krea's flow = (input - x0) / sigma
            worst["flow_pred"] = max(worst.get("flow_pred", 0.0), _diff(c.flow, T[f"{key}/flow_pred"]))
        where = f"{key} ({c.kind}, block {c.block})"
        assert c.rope_frames == tuple(m["rope_frames"]), where
        assert c.kv_written == tuple(m["kv_slots_written"]) and c.kv_attended == tuple(m["kv_slots_attended"]), where
        # the value the model was given: the reference's int64 [B, 1] / [B, F] zeros embed like float32 [B, F] zeros
        stored = T[f"{key}/timestep"]
        assert stored.dtype == getattr(torch, m["timestep_dtype"]), where
        assert torch.equal(c.timestep, stored.float().expand(c.timestep.shape)), where
        assert c.timestep[0].tolist() == [m["timestep"][0]] * c.model_input.shape[1], where
        if name in SF_RUNS:
            assert (c.kind == "prefix") == (m["timestep_dtype"] == "int64"), where
            assert c.rope_frames[0] * fx.tokens_per_frame == m["current_start_tokens"], where
        else:
            assert c.kind == m["kind"] and m["block"] == f"block{c.block}", where
    return worst


@pytest.mark.parametrize("name", SF_RUNS)
def test_self_forcing_run_is_reproduced(fx, results, name):
    r = _run(fx, results, name)
    worst = _check_calls(fx, name, r)
    T = fx.T
    given = T[f"{name}/initial_latent"]
    out = T[f"{name}/output_latents"]
    worst["output_latents"] = _diff(r.latents, out)
    assert torch.equal(r.latents[:, :given.shape[1]], given)  # the given latents are output verbatim
    assert fx.meta["self_forcing_checks_max_abs"][f"{name}_output[:, :{given.shape[1]}]_vs_initial_latent"] == 0.0
    layers = fx.dit_cfg.num_layers
    worst["kv_cache"] = max(max(_diff(r.kv.keys(i).transpose(1, 2), T[f"{name}/kv_cache/layer{i}/k"]),
                                _diff(r.kv.values(i).transpose(1, 2), T[f"{name}/kv_cache/layer{i}/v"]))
                            for i in range(layers))
    assert r.latents.shape[1] == given.shape[1] + fx.frames_per_block * fx.meta["sizes"]["blocks"]
    print(f"\n[pixels {name}] " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


@pytest.mark.parametrize("name", KREA_RUNS)
def test_krea_run_is_reproduced(fx, results, name):
    r = _run(fx, results, name)
    worst = _check_calls(fx, name, r)
    T, meta = fx.T, fx.meta["krea"][name]
    worst["all_latents"] = _diff(r.latents, T[f"{name}/all_latents"])
    assert len(r.encodes) == len(meta["encodes"])
    for i, (z, m) in enumerate(zip(r.encodes, meta["encodes"])):
        assert list(z.shape) == m["latent_shape"], (name, i)
        worst[f"encode{i}"] = _diff(z, T[f"{name}/encode{i}/latent"])
        if f"{name}/encode{i}/pixels" in T:  # anchors: the decoded frame the session re-encoded
            worst[f"encode{i}/pixels"] = _diff(r.encode_pixels[i], T[f"{name}/encode{i}/pixels"])
    if f"{name}/session_noise" in T:
        worst["session_noise"] = _diff(r.session_noise, T[f"{name}/session_noise"])
    assert r.pixels_sent == meta["pixel_frames_sent_per_block"]
    assert sum(c.kind == "denoise" for c in r.calls) == 5 * meta["blocks_generated"]
    assert (r.stopped is not None) == ("stopped_with" in meta)
    print(f"\n[pixels {name}] " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


def test_krea_start_frame_latents_seed_the_context_and_are_not_output(fx, results):
    r = _run(fx, results, "krea_start_frame")
    start = r.encodes[0].permute(0, 2, 1, 3, 4)  # the image repeated 9 times, encoded: 3 latent frames
    assert torch.equal(r.latents[:, :3], start)
    assert torch.equal(r.calls[0].model_input, start) and r.calls[0].kind == "kv_rebuild"
    assert r.calls[1].rope_frames == (3, 4, 5)  # the first generated block follows the start latents
    assert r.pixels_sent[0] == 6  # decoding starts with the first generated block (9 frames, 3 dropped)


def test_v2v_noises_with_t0_over_1000_and_runs_only_the_truncated_schedule(fx, results):
    r = _run(fx, results, "v2v_s070")
    first = r.calls[0]
    assert first.timestep[0, 0].item() == pytest.approx(921.0526, abs=1e-4)  # not 1000: the strength's first step
    assert torch.equal(first.model_input, r.session_noise[:, :3])  # the noised input replaces the pure noise
    assert sum(c.kind == "denoise" and c.block == 0 for c in r.calls) == 5
