"""Block-causal Wan DiT: parity with the Self-Forcing reference fixture and cache invariants."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.models.wan_config import PRESETS, detect_preset
from sdvg_core.engine.schedule import add_noise, flow_to_x0, self_forcing_plan, timestep_tensor
from sdvg_core.models.wan import CausalWan, KVCache, WanDiT, build_random

TOL = 1e-4  # fixtures README §5: honest fp32 implementations land at 1e-6..1e-5; real bugs are >= 1.7e-3


@pytest.fixture(scope="module")
def causal_fixture():
    from conftest import require_shared

    d = require_shared("fixtures") / "causal_wan_tiny"
    w = load_file(d / "weights.safetensors")
    cfg = detect_preset(w)
    net = WanDiT(cfg).eval()
    net.load_state_dict(w, strict=True)
    return cfg, net, load_file(d / "tensors.safetensors")


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float().reshape(a.shape)).abs().max().item()


def test_self_forcing_inference_matches_reference(causal_fixture):
    """All 15 model calls (4 denoising + 1 commit per block, 3 blocks), x0s, final latents and KV cache."""
    cfg, net, T = causal_fixture
    run = CausalWan(net, cfg)
    plan = self_forcing_plan()
    inter: dict[str, torch.Tensor] = {}
    text = run.encode_text(T["text_context"], hook=lambda n, t: inter.__setitem__(n, t))
    kv = KVCache.empty(cfg, batch=1, window_frames=21, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    worst = {"flow_pred": 0.0, "x0_pred": 0.0, "intermediates": 0.0}
    for b in range(3):
        x = T["initial_noise"][:, 3 * b:3 * b + 3]
        for s, t in enumerate(plan.timesteps):
            k = 5 * b + s
            hk: dict[str, torch.Tensor] = {}
            assert torch.equal(x, T[f"call{k:02d}/model_input"]) or _maxdiff(x, T[f"call{k:02d}/model_input"]) < TOL
            out = run.forward(x, timestep_tensor(t, 1, 3), text, frame_offset=3 * b, kv=kv,
                              hook=lambda n, v: hk.__setitem__(n, v))
            x0 = flow_to_x0(x, out.flow, plan.sigmas[s])
            worst["flow_pred"] = max(worst["flow_pred"], _maxdiff(out.flow, T[f"call{k:02d}/flow_pred"]))
            worst["x0_pred"] = max(worst["x0_pred"], _maxdiff(x0, T[f"call{k:02d}/x0_pred"]))
            for name, ref_key in ((n, f"call{k:02d}/inter/{n}") for n in list(hk)):
                if ref_key in T:
                    worst["intermediates"] = max(worst["intermediates"], _maxdiff(hk[name], T[ref_key]))
            if s + 1 < plan.num_steps:
                x = add_noise(x0, T["renoise_noise"][b, s][None], plan.sigmas[s + 1])
        commit = run.forward(x0, timestep_tensor(0.0, 1, 3), text, frame_offset=3 * b, kv=kv, commit=True)
        kv = commit.kv
        k = 5 * b + 4
        worst["flow_pred"] = max(worst["flow_pred"], _maxdiff(commit.flow, T[f"call{k:02d}/flow_pred"]))
        worst[f"block{b}/denoised"] = _maxdiff(x0, T[f"block{b}/denoised"])
    worst["text_embedding"] = _maxdiff(inter["text_embedding_out"], T["call00/inter/text_embedding_out"])
    worst["kv_cache"] = max(max(_maxdiff(kv.keys(i).transpose(1, 2), T[f"kv_cache/layer{i}/k"]),
                                _maxdiff(kv.values(i).transpose(1, 2), T[f"kv_cache/layer{i}/v"])) for i in range(2))
    assert run.calls == 15
    print("\n[parity causal_wan_tiny] " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


def test_full_sequence_masked_forward_matches_reference(causal_fixture):
    cfg, net, T = causal_fixture
    run = CausalWan(net, cfg)
    text = run.encode_text(T["text_context"])
    a = run.forward(T["output_latents"], T["fullseq_A/timestep"], text, block_mask_frames=3)
    b = run.forward(T["fullseq_B/model_input"], T["fullseq_B/timestep"], text, block_mask_frames=3)
    diffs = {"A_flow": _maxdiff(a.flow, T["fullseq_A/flow_pred"]), "B_flow": _maxdiff(b.flow, T["fullseq_B/flow_pred"])}
    # frames 6-8 of B at t=1000 equal the first denoising call of block 2
    x0_b = flow_to_x0(T["fullseq_B/model_input"], b.flow, 1.0)
    diffs["B_x0_block2"] = _maxdiff(x0_b[:, 6:], T["fullseq_B/x0_pred"][:, 6:])
    print("\n[parity fullseq] " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    assert max(diffs.values()) <= TOL, diffs
    mask = T["fullseq/block_causal_mask"].bool()
    block_of = torch.arange(54) // 18
    ours = block_of[None, :] <= block_of[:, None]
    assert torch.equal(ours, mask | torch.eye(54, dtype=torch.bool))


def _random_setup(seed: int = 0, frames: int = 9, h: int = 4, w: int = 6):
    cfg = PRESETS["tiny"]
    net = build_random(cfg, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    ctx = torch.randn(1, 16, cfg.text_dim, generator=gen)
    lat = torch.randn(1, frames, 16, h, w, generator=gen)
    return cfg, CausalWan(net, cfg), ctx, lat


def test_cached_block_by_block_equals_full_block_causal_forward():
    """Commit each block into the KV cache at t=0, then the next block's noisy call == full masked forward."""
    cfg, run, ctx, lat = _random_setup()
    text = run.encode_text(ctx)
    t = torch.tensor([[0.0] * 6 + [700.0] * 3])
    full = run.forward(lat, t, text, block_mask_frames=3).flow
    kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    outs = []
    for b in range(3):
        tb = t[:, 3 * b:3 * b + 3]
        r = run.forward(lat[:, 3 * b:3 * b + 3], tb, text, frame_offset=3 * b, kv=kv, commit=True)
        outs.append(r.flow)
        kv = r.kv
    diff = _maxdiff(torch.cat(outs, 1), full)
    print(f"\n[invariant] cached block-by-block vs full masked forward: {diff:.2e}")
    assert diff <= 1e-5


def test_scratch_writes_and_branches_never_change_a_committed_view():
    """Copy-on-write: drafting from a parent view after a child committed leaves the child's keys intact."""
    cfg, run, ctx, lat = _random_setup(seed=3)
    text = run.encode_text(ctx)
    t0 = timestep_tensor(0.0, 1, 3)
    kv0 = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    parent = run.forward(lat[:, :3], t0, text, kv=kv0, commit=True).kv
    child_a = run.forward(lat[:, 3:6], t0, text, frame_offset=3, kv=parent, commit=True).kv
    snapshot = [child_a.keys(i).clone() for i in range(cfg.num_layers)]
    # another branch (a different block 1) from the same parent, scratch then commit
    other = torch.randn_like(lat[:, 3:6])
    run.forward(other, timestep_tensor(900.0, 1, 3), text, frame_offset=3, kv=parent)
    child_b = run.forward(other, t0, text, frame_offset=3, kv=parent, commit=True).kv
    assert child_b.buffer is not child_a.buffer
    for i in range(cfg.num_layers):
        assert torch.equal(child_a.keys(i), snapshot[i])
        assert torch.equal(parent.keys(i), child_a.keys(i)[:, :, :18])
    # scratch writes after a view's prefix leave the view itself unchanged
    before = [parent.keys(i).clone() for i in range(cfg.num_layers)]
    run.forward(other, timestep_tensor(500.0, 1, 3), text, frame_offset=3, kv=parent)
    assert all(torch.equal(parent.keys(i), before[i]) for i in range(cfg.num_layers))


def test_window_relative_rope_equals_absolute():
    """RoPE depends on position differences only: shifting every frame position changes nothing (to fp32 noise)."""
    cfg, run, ctx, lat = _random_setup(seed=5)
    text = run.encode_text(ctx)
    t = timestep_tensor(600.0, 1, 6)
    a = run.forward(lat[:, :6], t, text, frame_offset=0, block_mask_frames=3).flow
    b = run.forward(lat[:, :6], t, text, frame_offset=12, block_mask_frames=3).flow
    diff = _maxdiff(a, b)
    print(f"\n[invariant] RoPE offset 0 vs 12: {diff:.2e}")
    assert diff <= 1e-4
    c = run.forward(lat[:, 3:6], timestep_tensor(600.0, 1, 3), text, frame_offset=0).flow
    assert _maxdiff(c, a[:, 3:6]) > 1e-3  # but the context really matters


def test_rolling_window_keeps_newest_frames():
    cfg, run, ctx, lat = _random_setup(seed=7, frames=12)
    text = run.encode_text(ctx)
    kv = KVCache.empty(cfg, batch=1, window_frames=6, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    t0 = timestep_tensor(0.0, 1, 3)
    views = []
    for b in range(4):
        kv = run.forward(lat[:, 3 * b:3 * b + 3], t0, text, frame_offset=3 * b, kv=kv, commit=True).kv
        views.append(kv)
    assert views[1].frames == 6 and views[2].frames == 6 and views[3].frames == 6
    # after rolling, the window holds blocks 2 and 3: block 3's keys were written at slots 18..35
    assert torch.equal(views[3].keys(0)[:, :, :18], views[2].keys(0)[:, :, 18:])


def test_bad_inputs_are_refused():
    cfg, run, ctx, lat = _random_setup()
    with pytest.raises(ValueError, match="width 7"):
        run.encode_text(torch.zeros(1, 4, 7))
    text = run.encode_text(ctx)
    with pytest.raises(ValueError, match="channels"):
        run.forward(torch.zeros(1, 3, 8, 4, 6), timestep_tensor(0.0, 1, 3), text)
    with pytest.raises(ValueError, match="timestep"):
        run.forward(lat[:, :3], timestep_tensor(0.0, 1, 2), text)


@pytest.mark.parametrize("name", ["wan2.1-t2v-1.3b", "wan2.1-t2v-14b"])
def test_real_presets_have_published_sizes(name):
    cfg = PRESETS[name]
    with torch.device("meta"):
        net = WanDiT(cfg)
    n = sum(p.numel() for p in net.parameters())
    assert n == cfg.num_params()
    expected = {"wan2.1-t2v-1.3b": 1.42e9, "wan2.1-t2v-14b": 14.3e9}[name]  # docs/design.md §2
    assert abs(n - expected) / expected < 0.02, n
    assert cfg.head_dim == 128 and cfg.rope_pairs == (22, 21, 21)
    sd = {k: torch.empty(v.shape, device="meta") for k, v in net.state_dict().items()}
    assert detect_preset(sd).name == name
