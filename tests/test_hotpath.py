"""CausalWan hot path: fp32 RoPE tables, injectable attention, cached modulation casts, no host syncs (the whole-block
compile: tests/test_compile.py; the static-shape cache: tests/test_static_kv.py)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core import CausalWan
from sdvg_core.models.wan import KVCache, RopeCosSin, WanDiT, apply_rope_real, attention, build_random
from sdvg_core.models.wan_config import PRESETS, detect_preset
from wan_reference import apply_rope, block_causal_forward, exact_rope, rope_freqs

TOL = 1e-4  # fixtures README §5: the parity bound of every fp32 path


def _setup(seed: int = 0, dtype: torch.dtype = torch.float32):
    cfg = PRESETS["tiny"]
    net = build_random(cfg, seed, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randn(1, 8, cfg.text_dim, generator=gen)  # [B, L, text_dim]
    x = torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)  # [B, F, C, H, W]: 3 frames, 6 tokens each
    return cfg, net, ctx, x


def _kv(cfg, frames: int = 9) -> KVCache:
    return KVCache.empty(cfg, batch=1, window_frames=frames, tokens_per_frame=6, device="cpu", dtype=torch.float32)


def test_real_rope_matches_complex128_rope():
    """The fp32 cos/sin rotation equals the complex128 one (Wan's) to fp32 rounding, at positions far from 0."""
    cfg, net, _, _ = _setup()
    run = CausalWan(net, cfg)
    freqs = rope_freqs(cfg, (500, 501, 502), 2, 3)  # [18, D/2] complex128
    rope = run.rope.at((500, 501, 502), 2, 3)
    assert isinstance(rope, RopeCosSin) and rope.cos.dtype == torch.float32
    x = torch.randn(2, 18, cfg.num_heads, cfg.head_dim)  # [B, S, N, D]
    exact, fast = apply_rope(x, freqs), apply_rope_real(x, rope)
    assert (exact - fast).abs().max().item() < 1e-5
    assert (fast - x).abs().max().item() > 0.1  # it does rotate


def test_fast_rope_matches_fixture_as_exact_rope():
    """Both RoPE paths stay within the fixtures' bound of the Self-Forcing reference on a cached 3-block run."""
    from conftest import require_shared
    from sdvg_core.sampling.timesteps import self_forcing_plan, timestep_tensor

    d = require_shared("fixtures") / "causal_wan_tiny"
    w = load_file(d / "weights.safetensors")
    cfg = detect_preset(w)
    net = WanDiT(cfg).eval()
    net.load_state_dict(w, strict=True)
    T = load_file(d / "tensors.safetensors")
    t = timestep_tensor(self_forcing_plan().timesteps[0], 1, 3)
    flows = {}
    for exact in (True, False):
        run = exact_rope(CausalWan(net, cfg)) if exact else CausalWan(net, cfg)
        out = run.forward(T["call00/model_input"], t, run.encode_text(T["text_context"]), kv=_kv(cfg, 21))
        flows[exact] = out.flow
        assert (out.flow - T["call00/flow_pred"].reshape(out.flow.shape)).abs().max().item() < TOL
    assert (flows[True] - flows[False]).abs().max().item() < 1e-5


def test_attention_goes_through_the_injected_function_without_mask():
    """Every self- and cross-attention of a cached forward calls attention_fn (3 tensors, no mask)."""
    cfg, net, ctx, x = _setup()
    calls = []

    def counting(q, k, v):
        calls.append((tuple(q.shape), tuple(k.shape)))
        return attention(q, k, v)

    ref = CausalWan(net, cfg)
    run = CausalWan(net, cfg, attention_fn=counting)
    t = torch.full((1, 3), 700.0)
    a = run.forward(x, t, run.encode_text(ctx), kv=_kv(cfg)).flow
    b = ref.forward(x, t, ref.encode_text(ctx), kv=_kv(cfg)).flow
    assert len(calls) == 2 * cfg.num_layers
    assert torch.equal(a, b)


def test_modulation_is_cast_once_and_recast_after_an_update():
    """bf16 modulation: one fp32 copy reused across calls; an in-place weight change (a LoRA patch) is seen."""
    cfg, net, ctx, x = _setup(dtype=torch.bfloat16)
    run = CausalWan(net, cfg)
    text = run.encode_text(ctx)
    t = torch.full((1, 3), 700.0)
    first = run.forward(x, t, text).flow
    cached = run._param(net.blocks[0].modulation)
    run.forward(x, t, text)
    assert run._param(net.blocks[0].modulation) is cached
    with torch.no_grad():
        net.blocks[0].modulation.add_(1.0)
    assert run._param(net.blocks[0].modulation) is not cached
    assert not torch.equal(run.forward(x, t, text).flow, first)


def test_forward_makes_no_host_sync(monkeypatch):
    """No .item()/.tolist() inside a cached forward (each is a device->host sync on a GPU)."""
    cfg, net, ctx, x = _setup()
    run = CausalWan(net, cfg)
    text = run.encode_text(ctx)
    kv = _kv(cfg)

    def boom(*_a, **_k):
        raise AssertionError("host sync inside the forward")

    monkeypatch.setattr(torch.Tensor, "item", boom)
    monkeypatch.setattr(torch.Tensor, "tolist", boom)
    kv = run.forward(x, torch.zeros(1, 3), text, kv=kv, commit=True).kv
    run.forward(x, torch.full((1, 3), 700.0), text, kv=kv, frame_offset=3)


@pytest.mark.parametrize("exact", [True, False])
def test_block_mask_path_still_masks(exact):
    """The training-time full-sequence path (the only masked one) keeps block 0 blind to block 1."""
    cfg, net, ctx, _ = _setup()
    run = exact_rope(CausalWan(net, cfg)) if exact else CausalWan(net, cfg)
    text = run.encode_text(ctx)
    x = torch.randn(1, 6, cfg.in_dim, 4, 6)
    t = torch.full((1, 6), 700.0)
    a = block_causal_forward(run, x, t, text, 3)
    y = x.clone()
    y[:, 3:] += 1.0
    b = block_causal_forward(run, y, t, text, 3)
    assert torch.equal(a[:, :3], b[:, :3]) and not torch.equal(a[:, 3:], b[:, 3:])


def test_timestep_sinusoids_are_made_once_per_timestep_tensor():
    """The recipes' timesteps come from `timestep_tensor` (one shared tensor per value and shape): one device sinusoid
    each, reused by later calls with neither a host-to-device copy nor a read of the timestep's value."""
    from sdvg_core.sampling.timesteps import timestep_tensor

    cfg, net, ctx, x = _setup()
    run = CausalWan(net, cfg)
    text = run.encode_text(ctx)
    for _ in range(2):
        for t in (700.0, 500.0):
            run.forward(x, timestep_tensor(t, 1, 3), text)
    assert len(run._sin_cache) == 2
    assert timestep_tensor(700.0, 1, 3) is timestep_tensor(700, 1, 3)
    a = run._sinusoid(timestep_tensor(700.0, 1, 3))
    assert a is run._sinusoid(timestep_tensor(700.0, 1, 3)) and a is not run._sinusoid(timestep_tensor(701.0, 1, 3))
    fresh = torch.full((1, 3), 700.0)  # another tensor of the same value: its own entry, the same numbers
    assert torch.equal(run._sinusoid(fresh), a) and len(run._sin_cache) == 4
    fresh.fill_(500.0)  # modified in place: never the stale entry
    assert torch.equal(run._sinusoid(fresh), run._sinusoid(timestep_tensor(500.0, 1, 3)))
