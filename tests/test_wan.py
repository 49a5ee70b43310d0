"""Block-causal Wan DiT: parity with the Self-Forcing reference fixture and cache invariants."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core import CausalWan, WanDiTConfig
from sdvg_core.models.wan_config import PRESETS, detect_preset
from sdvg_core.sampling.timesteps import add_noise, flow_to_x0, self_forcing_plan, timestep_tensor
from sdvg_core.models.kv_cache import KVCopyStats, StaleKVError
from sdvg_core.models.wan import KVCache, WanDiT, build_random
from wan_reference import block_causal_forward, exact_rope, rope_freqs

TOL = 1e-4  # fixtures README §5: honest fp32 implementations land at 1e-6..1e-5; real bugs are >= 1.7e-3


@dataclass(frozen=True)
class CausalFixture:
    """The causal_wan_tiny fixture: config and geometry read from its meta.json, the loaded network, the tensors."""

    cfg: WanDiTConfig
    net: WanDiT
    T: dict[str, torch.Tensor]
    blocks: int
    frames_per_block: int
    tokens_per_frame: int
    window_frames: int  # KV-cache capacity in latent frames
    calls_per_block: int


@pytest.fixture(scope="module")
def causal_fixture() -> CausalFixture:
    from conftest import require_shared

    d = require_shared("fixtures") / "causal_wan_tiny"
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    mc, geo = meta["model_config"], meta["geometry"]
    cfg = WanDiTConfig.from_mapping(mc, name="causal_wan_tiny")
    assert cfg.head_dim == mc["head_dim"] and list(cfg.rope_pairs) == mc["rope_split_t_h_w_complex_pairs"]
    net = WanDiT(cfg).eval()
    net.load_state_dict({k.removeprefix("model."): v for k, v in load_file(d / "weights.safetensors").items()},
                        strict=True)
    T = load_file(d / "tensors.safetensors")
    tpf = cfg.tokens_per_frame(geo["H"], geo["W"])
    assert tpf == geo["frame_seq_length"] and T["initial_noise"].shape[1] == geo["num_latent_frames"]
    capacity = meta["kv_cache"]["per_layer_shape"][1]  # [B, tokens, heads, head_dim]
    return CausalFixture(cfg, net, T, blocks=geo["num_blocks"], frames_per_block=geo["frames_per_block"],
                         tokens_per_frame=tpf, window_frames=capacity // tpf,
                         calls_per_block=meta["call_indexing"]["calls_per_block"])


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float().reshape(a.shape)).abs().max().item()


def test_self_forcing_inference_matches_reference(causal_fixture):
    """Every model call (denoising steps + commit per block), x0s, final latents and KV cache."""
    fx = causal_fixture
    cfg, T, F = fx.cfg, fx.T, fx.frames_per_block
    run = CausalWan(fx.net, cfg)
    plan = self_forcing_plan()
    assert fx.calls_per_block == plan.num_steps + 1  # the denoising steps and the commit
    inter: dict[str, torch.Tensor] = {}
    text = run.encode_text(T["text_context"], hook=lambda n, t: inter.__setitem__(n, t))
    kv = KVCache.empty(cfg, batch=1, window_frames=fx.window_frames, tokens_per_frame=fx.tokens_per_frame,
                       device="cpu", dtype=torch.float32)
    worst = {"flow_pred": 0.0, "x0_pred": 0.0, "intermediates": 0.0}
    for b in range(fx.blocks):
        x = T["initial_noise"][:, F * b:F * b + F]
        for s, t in enumerate(plan.timesteps):
            k = fx.calls_per_block * b + s
            hk: dict[str, torch.Tensor] = {}
            assert torch.equal(x, T[f"call{k:02d}/model_input"]) or _maxdiff(x, T[f"call{k:02d}/model_input"]) < TOL
            out = run.forward(x, timestep_tensor(t, 1, F), text, frame_offset=F * b, kv=kv,
                              hook=lambda n, v: hk.__setitem__(n, v))
            x0 = flow_to_x0(x, out.flow, plan.sigmas[s])
            worst["flow_pred"] = max(worst["flow_pred"], _maxdiff(out.flow, T[f"call{k:02d}/flow_pred"]))
            worst["x0_pred"] = max(worst["x0_pred"], _maxdiff(x0, T[f"call{k:02d}/x0_pred"]))
            for name, ref_key in ((n, f"call{k:02d}/inter/{n}") for n in list(hk)):
                if ref_key in T:
                    worst["intermediates"] = max(worst["intermediates"], _maxdiff(hk[name], T[ref_key]))
            if s + 1 < plan.num_steps:
                x = add_noise(x0, T["renoise_noise"][b, s][None], plan.sigmas[s + 1])
        commit = run.forward(x0, timestep_tensor(0.0, 1, F), text, frame_offset=F * b, kv=kv, commit=True)
        kv = commit.kv
        k = fx.calls_per_block * b + plan.num_steps
        worst["flow_pred"] = max(worst["flow_pred"], _maxdiff(commit.flow, T[f"call{k:02d}/flow_pred"]))
        worst[f"block{b}/denoised"] = _maxdiff(x0, T[f"block{b}/denoised"])
    worst["text_embedding"] = _maxdiff(inter["text_embedding_out"], T["call00/inter/text_embedding_out"])
    worst["kv_cache"] = max(max(_maxdiff(kv.keys(i).transpose(1, 2), T[f"kv_cache/layer{i}/k"]),
                                _maxdiff(kv.values(i).transpose(1, 2), T[f"kv_cache/layer{i}/v"]))
                            for i in range(cfg.num_layers))
    assert run.calls == fx.blocks * fx.calls_per_block
    print("\n[parity causal_wan_tiny] " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


def test_full_sequence_masked_forward_matches_reference(causal_fixture):
    fx = causal_fixture
    cfg, T, F = fx.cfg, fx.T, fx.frames_per_block
    run = CausalWan(fx.net, cfg)
    text = run.encode_text(T["text_context"])
    a = block_causal_forward(run, T["output_latents"], T["fullseq_A/timestep"], text, F)
    b = block_causal_forward(run, T["fullseq_B/model_input"], T["fullseq_B/timestep"], text, F)
    diffs = {"A_flow": _maxdiff(a, T["fullseq_A/flow_pred"]), "B_flow": _maxdiff(b, T["fullseq_B/flow_pred"])}
    # the last block of B is at t=1000 (sigma 1): it equals the first denoising call of that block
    last = slice(F * (fx.blocks - 1), F * fx.blocks)
    assert torch.all(T["fullseq_B/timestep"][:, last] == self_forcing_plan().timesteps[0])
    x0_b = flow_to_x0(T["fullseq_B/model_input"], b, 1.0)
    diffs["B_x0_last_block"] = _maxdiff(x0_b[:, last], T["fullseq_B/x0_pred"][:, last])
    print("\n[parity fullseq] " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    assert max(diffs.values()) <= TOL, diffs
    mask = T["fullseq/block_causal_mask"].bool()
    tokens_per_block = F * fx.tokens_per_frame
    n = fx.blocks * tokens_per_block
    block_of = torch.arange(n) // tokens_per_block
    ours = block_of[None, :] <= block_of[:, None]
    assert torch.equal(ours, mask | torch.eye(n, dtype=torch.bool))


def _random_setup(seed: int = 0, frames: int = 9, h: int = 4, w: int = 6):
    cfg = PRESETS["tiny"]
    net = build_random(cfg, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    ctx = torch.randn(1, 16, cfg.text_dim, generator=gen)
    lat = torch.randn(1, frames, cfg.in_dim, h, w, generator=gen)  # [1, F, C, h, w]
    return cfg, CausalWan(net, cfg), ctx, lat


def _tpf(cfg: WanDiTConfig, lat: torch.Tensor) -> int:
    """Tokens per latent frame of latents [B, F, C, h, w]."""
    return cfg.tokens_per_frame(lat.shape[-2], lat.shape[-1])


def test_cached_block_by_block_equals_full_block_causal_forward():
    """Commit each block into the KV cache at t=0, then the next block's noisy call == full masked forward."""
    cfg, run, ctx, lat = _random_setup()
    text = run.encode_text(ctx)
    t = torch.tensor([[0.0] * 6 + [700.0] * 3])
    full = block_causal_forward(run, lat, t, text, 3)
    kv = KVCache.empty(cfg, batch=1, window_frames=lat.shape[1], tokens_per_frame=_tpf(cfg, lat), device="cpu",
                       dtype=torch.float32)
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
    kv0 = KVCache.empty(cfg, batch=1, window_frames=lat.shape[1], tokens_per_frame=_tpf(cfg, lat), device="cpu",
                        dtype=torch.float32)
    block_tokens = 3 * _tpf(cfg, lat)
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
        assert torch.equal(parent.keys(i), child_a.keys(i)[:, :, :block_tokens])
    # scratch writes after a view's prefix leave the view itself unchanged
    before = [parent.keys(i).clone() for i in range(cfg.num_layers)]
    run.forward(other, timestep_tensor(500.0, 1, 3), text, frame_offset=3, kv=parent)
    assert all(torch.equal(parent.keys(i), before[i]) for i in range(cfg.num_layers))


def test_window_relative_rope_equals_absolute():
    """RoPE depends on position differences only: shifting every frame position changes nothing (to fp32 noise)."""
    cfg, run, ctx, lat = _random_setup(seed=5)
    text = run.encode_text(ctx)
    t = timestep_tensor(600.0, 1, 6)
    a = block_causal_forward(run, lat[:, :6], t, text, 3, frame_offset=0)
    b = block_causal_forward(run, lat[:, :6], t, text, 3, frame_offset=12)
    diff = _maxdiff(a, b)
    print(f"\n[invariant] RoPE offset 0 vs 12: {diff:.2e}")
    assert diff <= 1e-4
    c = run.forward(lat[:, 3:6], timestep_tensor(600.0, 1, 3), text, frame_offset=0).flow
    assert _maxdiff(c, a[:, 3:6]) > 1e-3  # but the context really matters


def test_rolling_window_keeps_newest_frames():
    cfg, run, ctx, lat = _random_setup(seed=7, frames=12)
    text = run.encode_text(ctx)
    copies = KVCopyStats()
    kv = KVCache.empty(cfg, batch=1, window_frames=6, tokens_per_frame=_tpf(cfg, lat), device="cpu", dtype=torch.float32,
                       copies=copies)
    block_tokens = 3 * _tpf(cfg, lat)
    t0 = timestep_tensor(0.0, 1, 3)
    views, keys = [], []
    for b in range(4):
        kv = run.forward(lat[:, 3 * b:3 * b + 3], t0, text, frame_offset=3 * b, kv=kv, commit=True).kv
        views.append(kv)
        keys.append(kv.keys(0).clone())  # logical order, read while the view is current
    assert views[1].frames == 6 and views[2].frames == 6 and views[3].frames == 6
    assert views[3].frame_ids == (6, 7, 8, 9, 10, 11)
    # after rolling, the window holds blocks 2 and 3: block 3's keys were written in the second block's slots
    assert torch.equal(keys[3][:, :, :block_tokens], keys[2][:, :, block_tokens:])
    # a ring: block 3 went into block 1's slots in place (no copy), so the view that still held block 1 is stale
    assert copies.forks == 0 and views[3].buffer is views[0].buffer
    assert not views[2].valid and views[3].valid
    with pytest.raises(StaleKVError):
        views[2].keys(0)


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


@pytest.mark.parametrize("exact", [False, True], ids=["fp32", "complex128"])
def test_rope_positions_past_the_1024_table_are_computed(exact):
    """RoPE has no length limit: positions past Wan's 1024-row table are position x frequency in float64 like the
    table's own rows (same bits at positions the table has), in the forward's fp32 tables, in float64 tables and in
    the complex128 reference (tests/wan_reference.py); a forward at any offset runs and only position differences
    matter (a shifted full-sequence forward gives the same output)."""
    from sdvg_core.models.wan_numerics import rope_angles

    cfg, run, ctx, lat = _random_setup(seed=9)
    if exact:
        run = exact_rope(run)
    ref = rope_angles(cfg, rows=6000)[0]  # float64 time angles [positions, pairs]
    assert torch.equal(ref[:cfg.rope_max_positions], rope_angles(cfg)[0])
    for offset in (1020, 1500, 5000):
        positions = torch.arange(offset, offset + 3, dtype=torch.float64)
        pairs = cfg.rope_pairs[0]
        inv = 1.0 / torch.pow(cfg.rope_theta, torch.arange(pairs, dtype=torch.float64) * 2 / (2 * pairs))
        direct = torch.outer(positions, inv)  # what Wan's rope_params computes for any row
        assert torch.equal(ref[offset:offset + 3], direct)
        rows = tuple(range(offset, offset + 3))
        if exact:
            got = torch.angle(rope_freqs(cfg, rows, 1, 1)[:, :pairs])
            assert torch.allclose(got, torch.angle(torch.polar(torch.ones_like(direct), direct)), atol=1e-12), offset
            assert torch.equal(run.rope.at(rows, 1, 1).cos[:, :pairs], direct.cos()), offset
        else:
            assert torch.equal(run.rope.at(rows, 1, 1).cos[:, :pairs], direct.cos().float()), offset
    text = run.encode_text(ctx)
    t = timestep_tensor(600.0, 1, 6)
    near = block_causal_forward(run, lat[:, :6], t, text, 3, frame_offset=0)
    far = block_causal_forward(run, lat[:, :6], t, text, 3, frame_offset=4000)
    assert _maxdiff(near, far) <= 1e-4
    with pytest.raises(ValueError, match="negative"):
        run.forward(lat[:, :3], timestep_tensor(0.0, 1, 3), text, frame_offset=-1)
