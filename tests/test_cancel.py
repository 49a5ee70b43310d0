"""Cancel inside long model operations: a raising interrupt stops a DiT forward within one transformer layer and a
VAE decode/encode within one block of one latent frame, and a cancelled call changes no cache."""
from __future__ import annotations

import pytest
import torch

from sdvg_core.demo.tiny import random_vae
from sdvg_core.models.wan import CausalWan, KVCache, build_random
from sdvg_core.models.wan_config import PRESETS


class Cancelled(Exception):
    """What the test's interrupt raises (ComfyUI raises InterruptProcessingException)."""


class RaiseOnCall:
    """An interrupt callback that raises on its n-th call (1-based) and counts calls."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls >= self.n:
            raise Cancelled


def _count_calls(modules) -> list[int]:
    """Forward-pre-hook counter over modules: how many of them started running."""
    started = [0]
    for m in modules:
        m.register_forward_pre_hook(lambda *_: started.__setitem__(0, started[0] + 1))
    return started


def _dit():
    cfg = PRESETS["tiny-target"]  # 6 layers
    net = build_random(cfg, seed=0)
    run = CausalWan(net, cfg)
    ctx = torch.randn(1, 8, cfg.text_dim)  # [B, L, text_dim]
    x = torch.randn(1, 3, cfg.in_dim, 4, 6)  # [B, F, C, H, W]
    return cfg, net, run, ctx, x


@pytest.mark.parametrize("n", [1, 3, 6])
def test_forward_stops_within_one_layer(n):
    cfg, net, run, ctx, x = _dit()
    text = run.encode_text(ctx)
    layers = _count_calls([b.self_attn.q for b in net.blocks])  # one call per layer started
    kv = KVCache.empty(cfg, batch=1, window_frames=6, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    stop = RaiseOnCall(n)
    with pytest.raises(Cancelled):
        run.forward(x, torch.full((1, 3), 700.0), text, kv=kv, commit=True, interrupt=stop)
    assert layers[0] == n - 1  # the layers before the n-th check ran; nothing after it
    assert kv.length == 0 and kv.buffer.frontier == 0  # nothing committed
    assert run.forward(x, torch.zeros(1, 3), text, kv=kv, commit=True).kv.length == 18  # the cache is reusable


def test_forward_without_interrupt_checks_every_layer():
    cfg, net, run, ctx, x = _dit()
    never = RaiseOnCall(10**9)
    run.forward(x, torch.full((1, 3), 700.0), run.encode_text(ctx), interrupt=never)
    assert never.calls == cfg.num_layers


def test_encode_text_stops_within_one_layer():
    cfg, net, run, ctx, _ = _dit()
    layers = _count_calls([b.cross_attn.k for b in net.blocks])
    with pytest.raises(Cancelled):
        run.encode_text(ctx, interrupt=RaiseOnCall(3))
    assert layers[0] == 1  # the first check is before the text embedding, the second before layer 0


def _decoder_blocks(vae) -> list[torch.nn.Module]:
    return [*vae.decoder.middle, *vae.decoder.upsamples]


def test_decode_stops_within_one_latent_frame_and_one_block():
    vae = random_vae(1)
    z = torch.randn(1, vae.config.z_dim, 3, 4, 6)  # [B, C, T, h, w]: 3 latent frames
    per_frame = len(_decoder_blocks(vae)) + 1  # one check per block plus one per frame
    frames = _count_calls([vae.conv2])  # conv2 runs once per latent frame
    blocks = _count_calls(_decoder_blocks(vae))
    stop = RaiseOnCall(per_frame + 3)  # frame 0 entirely; frame 1: its check, block 0, then the check that raises
    with pytest.raises(Cancelled):
        vae.decode_stream(z, None, interrupt=stop)
    assert frames[0] == 2  # frame 2 never started
    assert blocks[0] == (per_frame - 1) + 1
    full, _ = vae.decode_stream(z, None, interrupt=RaiseOnCall(10**9))
    assert full.shape[2] == 1 + 4 * 2


def test_cancelled_decode_leaves_the_cache_usable():
    vae = random_vae(1)
    z = torch.randn(1, vae.config.z_dim, 2, 4, 6)
    _, cache = vae.decode_stream(z[:, :, :1])
    before = [None if h is None else h.clone() for h in cache.histories]
    with pytest.raises(Cancelled):
        vae.decode_stream(z[:, :, 1:], cache, interrupt=RaiseOnCall(4))
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(before, cache.histories))
    a, _ = vae.decode_stream(z[:, :, 1:], cache)
    b = vae.decode(z)[:, :, 1:]
    assert torch.equal(a, b)


def test_anchor_encode_stops_within_one_block():
    vae = random_vae(1)
    blocks = _count_calls([*vae.encoder.downsamples, *vae.encoder.middle])
    with pytest.raises(Cancelled):
        vae.encode_anchor_frame(torch.rand(1, 3, 32, 48) * 2 - 1, (32, 48), interrupt=RaiseOnCall(2))
    assert blocks[0] == 1
