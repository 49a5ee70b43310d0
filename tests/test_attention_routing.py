"""Every attention backend a ComfyUI host can select is routed or knowingly declined (nodes/attention.py); a MODEL
carrying its own choice (0.33's Model Attention Backend) is routed through it. The host's real functions and their
deviation from SDPA: tests/comfy_attention_probe.py (real-host suite)."""
from __future__ import annotations

import logging
import sys
import types

import pytest
import torch


@pytest.fixture()
def host(tmp_path, monkeypatch):
    import fake_host

    with fake_host.installed(tmp_path) as pack:
        mod = types.ModuleType("comfy.ldm.modules.attention")
        for name in ("comfy.ldm", "comfy.ldm.modules"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", mod)
        sys.modules["comfy.ldm.modules"].attention = mod
        yield pack.nodes.attention, mod


def _backend(name: str, calls: list, masks: list | None = None):
    def fn(q, k, v, heads, mask=None, skip_reshape=False, transformer_options=None, **_):
        calls.append((name, heads, transformer_options))
        if masks is not None:
            masks.append(mask)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).flatten(2)

    fn.__name__ = name
    return fn


@pytest.mark.parametrize("name", ["attention_sage", "attention3_sage", "attention_flash", "attention_xformers",
                                  "attention_comfy_kitchen_int8"])
def test_dedicated_kernels_are_routed(host, name):
    attn, mod = host
    calls = []
    mod.optimized_attention = _backend(name, calls)
    fn = attn.host_attention()
    assert fn in (attn.comfy_attention, attn.comfy_attention_unmasked) and attn.routing()[0] == "routed"
    q = torch.randn(1, 2, 5, 8)
    fn(q, q, q)
    assert calls == [(name, 2, None)]


@pytest.mark.parametrize("name", ["attention_sage", "attention_xformers", "attention_flash"])
def test_a_masked_call_reaches_the_kernels_mask_or_stays_on_sdpa(host, name):
    """CausalWan gives `mask=` (a KV span still filling) to a kernel that takes it: ComfyUI's backends do, as `mask`;
    flash-attn has none (NO_MASK: ComfyUI would warn and fall back on every call), so SDVG's SDPA takes those calls.
    Either way the result is the masked attention."""
    from sdvg_core.models.wan import CausalWan, KVCache, build_random
    from sdvg_core.models.wan_config import PRESETS
    from sdvg_core.models.wan_numerics import takes_mask
    from sdvg_core.sampling.timesteps import timestep_tensor

    attn, mod = host
    calls, masks = [], []
    mod.optimized_attention = _backend(name, calls, masks)
    fn = attn.host_attention()
    assert takes_mask(fn) == (name not in attn.NO_MASK)
    cfg = PRESETS["tiny"]
    net = build_random(cfg, 0)
    gen = torch.Generator().manual_seed(0)
    ctx, x = torch.randn(1, 8, cfg.text_dim, generator=gen), torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)
    outs = []
    for kernel in (None, fn):
        run = CausalWan(net, cfg, attention_fn=kernel)
        text = run.encode_text(ctx)
        kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
        kv = run.forward(x, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True).kv
        outs.append(run.forward(x, timestep_tensor(700.0, 1, 3), text, kv=kv, frame_offset=3).flow)  # masked span
    given = [m for m in masks if m is not None]
    if name in attn.NO_MASK:
        assert not given  # never a masked call
    else:
        assert len(given) == cfg.num_layers and given[0].shape == (1, 1, 1, 9 * 6)
    assert (outs[0] - outs[1]).abs().max().item() < 1e-5


@pytest.mark.parametrize("name", ["attention_pytorch", "attention_basic", "attention_sub_quad", "attention_split"])
def test_sdpa_and_slow_fallbacks_are_declined(host, name):
    attn, mod = host
    mod.optimized_attention = _backend(name, [])
    assert attn.host_attention() is None and attn.routing() == ("declined", attn.DECLINED[name])


def test_an_unknown_backend_is_declined_with_a_warning(host, caplog):
    attn, mod = host
    mod.optimized_attention = _backend("attention_new_kernel", [])
    with caplog.at_level(logging.WARNING, logger="SDVG"):
        assert attn.host_attention() is None
    assert "attention_new_kernel" in caplog.text


def test_a_models_own_attention_choice_is_routed_through_it(host):
    """ComfyUI's optimized_attention dispatches to transformer_options' override: the pack passes the MODEL's."""
    attn, mod = host
    calls = []
    mod.optimized_attention = _backend("attention_sub_quad", calls)  # the host's own choice is a declined one
    options = {attn.OVERRIDE_KEY: object()}
    model = types.SimpleNamespace(model_options={"transformer_options": options})
    fn = attn.host_attention(model)
    assert fn is not None and attn.routing(model)[0] == "routed"
    q = torch.randn(1, 2, 5, 8)
    fn(q, q, q)
    assert calls == [("attention_sub_quad", 2, options)]  # the options reach ComfyUI's wrapper, which dispatches
    fn(q, q, q, mask=torch.zeros(1, 1, 1, 5))  # a masked call keeps the MODEL's choice too
    assert attn.host_attention(types.SimpleNamespace(model_options={})) is None
