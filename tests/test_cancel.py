"""Cancel inside long model operations: a raising interrupt stops a DiT forward within one transformer layer and a
VAE decode/encode within one block of one latent frame, and a cancelled call changes no cache."""
from __future__ import annotations

import sys

import pytest
import torch

from sdvg_core.demo.tiny import random_vae
from sdvg_core import CausalWan
from sdvg_core.models.wan import KVCache, build_random
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


# ----------------------------------------------------------------------------------- refusing sizes up front
def test_decoder_cache_estimate_bounds_the_real_cache():
    from sdvg_core.engine.memory import vae_decode_memory

    vae = random_vae(0)
    _, cache = vae.decode_stream(torch.randn(1, vae.config.z_dim, 2, 6, 8))  # 48x64 pixels
    est, _ = vae_decode_memory(vae.config, torch.float32, 48, 64)
    assert cache.nbytes <= est <= 1.01 * cache.nbytes


def test_kv_estimate_is_the_allocated_window():
    from sdvg_core.engine.memory import dit_memory

    cfg = PRESETS["tiny-target"]
    kv = KVCache.empty(cfg, batch=1, window_frames=6, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    est = dit_memory(cfg, torch.float32, tokens_per_frame=6, window_frames=6, frames_per_block=3)
    assert est.kv == kv.nbytes and est.window_tokens == 36
    assert est.weights == sum(p.numel() * 4 for p in build_random(cfg).parameters())


def test_self_forcing_window_is_the_whole_video():
    """At 832x480, 9 blocks: Krea's window is 9,360 tokens, Self-Forcing's the whole video (27 frames, 42,120)."""
    from sdvg_core import estimate_for_spec, recipe_by_name, GenerationSpec, PromptConditioning
    from sdvg_core.models.vae import VAE_PRESETS

    spec = GenerationSpec(PromptConditioning.make("p", torch.zeros(1, 4, 4096)), 832, 480, 9, 0)
    dits = [(PRESETS["wan2.1-t2v-14b"], torch.bfloat16)]
    vae = VAE_PRESETS["wan2.1-vae"]
    krea = estimate_for_spec(spec, recipe_by_name("krea"), dits, vae, torch.bfloat16)
    sf = estimate_for_spec(spec, recipe_by_name("self_forcing"), dits, vae, torch.bfloat16)
    assert krea.dits[0].window_tokens == 9360 and sf.dits[0].window_tokens == 42120
    assert sf.dits[0].kv * 2 == krea.dits[0].kv * 9  # 4.5x the KV reservation (it was once fixed at 9,360 tokens)


def test_refuses_a_size_that_cannot_fit_naming_estimate_and_limit():
    from sdvg_core import MemoryRefused
    from sdvg_core.engine.memory import GIB, check_fits, estimate_generation
    from sdvg_core.models.vae import VAE_PRESETS

    def est(h, w):
        return estimate_generation(dits=[(PRESETS["wan2.1-t2v-14b"], torch.bfloat16),
                                         (PRESETS["wan2.1-t2v-1.3b"], torch.bfloat16)],
                                   vae=VAE_PRESETS["wan2.1-vae"], vae_dtype=torch.bfloat16, height=h, width=w,
                                   window_frames=6, context_frames=3)

    check_fits(est(480, 832), 80 * GIB)  # Krea at 832x480 fits an 80 GB card
    with pytest.raises(MemoryRefused) as e:
        check_fits(est(4096, 4096), 141 * GIB, "cuda:0")
    msg = str(e.value)
    assert "GiB" in msg and "141.0 GiB of cuda:0" in msg and "KV window" in msg and "VAE decode" in msg


# ----------------------------------------------------------------------------------- the host: ComfyUI sees SDVG memory
@pytest.fixture()
def fake_pack(tmp_path):
    import fake_host

    with fake_host.installed(tmp_path) as pack:
        mm = sys.modules["comfy.model_management"]
        old = (mm.FAKE_FREE_BYTES, mm.FAKE_TOTAL_BYTES)
        pack.nodes.shared_memo.MEMO.clear()
        try:
            yield pack, mm
        finally:
            mm.FAKE_FREE_BYTES, mm.FAKE_TOTAL_BYTES = old
            pack.nodes.shared_memo.MEMO.clear()
            mm.current_loaded_models.clear()


def _big_entry() -> torch.Tensor:
    return torch.zeros(80 * 2**20 // 4)  # 80 MB: a "big" memo entry (the small tier holds <= 64 MB)


def _sdvg_load(pack) -> None:
    """One SDVG model call's load: registers the memo with ComfyUI's memory manager (as every SDVG call does)."""
    cm = pack.nodes.comfy_memory
    cm.load(cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu")))


def test_loading_another_model_reclaims_memo_caches(fake_pack):
    pack, mm = fake_pack
    memo, cm = pack.nodes.shared_memo.MEMO, pack.nodes.comfy_memory
    memo.put(("kv", "run"), _big_entry())
    _sdvg_load(pack)
    assert memo.large.bytes > 0 and cm.registered()
    patcher = cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu"))  # another pack's model
    mm.load_models_gpu([patcher], memory_required=1 << 20)  # room enough: the caches stay
    assert memo.large.bytes > 0
    mm.FAKE_FREE_BYTES = 1 << 20  # the device is full: another model's load must reclaim SDVG's caches
    mm.load_models_gpu([patcher], memory_required=1 << 30)
    assert memo.large.bytes == 0


def test_unload_models_releases_memo_caches(fake_pack):
    pack, mm = fake_pack
    memo = pack.nodes.shared_memo.MEMO
    memo.pin("head", ("decoder", "run"), _big_entry())
    memo.put(("block", "run"), torch.zeros(1 << 20))  # a small entry: it goes too
    _sdvg_load(pack)
    mm.unload_all_models()  # what the Unload Models button and /free run
    assert memo.large.bytes == 0 and memo.large.pinned_bytes == 0 and memo.small.bytes == 0
    assert not pack.nodes.comfy_memory.registered()


def _session(pack, recipe: str):
    """A host Session over the tiny target and VAE, through the pack's own modules (as ComfyUI imports them)."""
    import importlib

    n = pack.nodes
    tiny = importlib.import_module(pack.__name__ + ".sdvg_core.demo.tiny")
    engine = importlib.import_module(pack.__name__ + ".sdvg_core.engine.engine")
    recipes = importlib.import_module(pack.__name__ + ".sdvg_core.engine.recipes")
    cfg = PRESETS["tiny-target"]
    dit = n.hosted.host_file_dit(tiny.build_random(cfg, seed=0), cfg, torch.float32, "k-target")
    vae = n.hosted.HostedVAE(tiny.random_vae(1), "k-vae")
    return n.session.Session(n.hosted.DiTHandle("target", dit, ""), None, vae, None,
                        engine.EngineConfig(recipe=recipes.recipe_by_name(recipe)))


def test_start_sizes_the_reservation_from_the_recipe_and_refuses_what_cannot_fit(fake_pack):
    import importlib

    pack, mm = fake_pack
    state = importlib.import_module(pack.__name__ + ".sdvg_core.engine.state")
    memory = importlib.import_module(pack.__name__ + ".sdvg_core.engine.memory")
    spec = state.GenerationSpec(state.PromptConditioning.make("p", torch.zeros(1, 4, 32)), 96, 64, 9, 0)
    krea, sf = _session(pack, "krea"), _session(pack, "self_forcing")
    krea.reserve(spec)
    sf.reserve(spec)
    k, s = krea.target.dit.work_bytes, sf.target.dit.work_bytes
    cfg, tpf = PRESETS["tiny-target"], (64 // 16) * (96 // 16)  # 24 tokens per latent frame at 96x64
    # Self-Forcing's window is the whole video (9 blocks = 27 latent frames), Krea's 6 (context rebuilt 3 at a time)
    assert s == memory.dit_memory(cfg, torch.float32, tokens_per_frame=tpf, window_frames=27, frames_per_block=3).step
    assert k == memory.dit_memory(cfg, torch.float32, tokens_per_frame=tpf, window_frames=6, frames_per_block=3,
                                  context_frames=3).step
    assert s > k
    mm.FAKE_TOTAL_BYTES = 1 << 20
    with pytest.raises(memory.MemoryRefused, match=r"GiB of cpu"):
        krea.reserve(spec)


def test_sdvg_own_model_swaps_keep_the_memo_caches(fake_pack):
    """Inside a generation SDVG swaps its own models; that must not drop the caches the generation is reading."""
    pack, mm = fake_pack
    memo = pack.nodes.shared_memo.MEMO
    memo.put(("kv", "run"), _big_entry())
    _sdvg_load(pack)
    mm.FAKE_FREE_BYTES = 0  # no room at all: an outside load would reclaim the caches
    dit = pack.nodes.hosted.host_file_dit(build_random(PRESETS["tiny"], seed=0), PRESETS["tiny"], torch.float32, "k")
    dit.ensure_loaded()
    assert memo.large.bytes > 0 and pack.nodes.comfy_memory.registered()


def test_comfy_attention_is_injected_only_for_a_dedicated_kernel(fake_pack, monkeypatch):
    """--use-sage-attention etc. route SDVG's attention through ComfyUI; its slow fallbacks leave SDPA in place."""
    import types

    from sdvg_core.models.wan import attention

    pack, _ = fake_pack
    attn, hosted = pack.nodes.attention, pack.nodes.hosted
    calls = []

    def attention_sage(q, k, v, heads, mask=None, skip_reshape=False, **_):
        calls.append((heads, skip_reshape, mask))
        return attention(q, k, v)

    mod = types.ModuleType("comfy.ldm.modules.attention")
    for name in ("comfy.ldm", "comfy.ldm.modules"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", mod)
    sys.modules["comfy.ldm.modules"].attention = mod
    mod.optimized_attention = attention_sage
    assert attn.host_attention() is attn.comfy_attention
    cfg = PRESETS["tiny"]
    dit = hosted.host_file_dit(build_random(cfg, seed=0), cfg, torch.float32, "k")
    text = dit.encode_text(torch.randn(1, 8, cfg.text_dim))
    dit.forward(torch.randn(1, 3, cfg.in_dim, 4, 6), torch.full((1, 3), 700.0), text)
    assert calls == [(cfg.num_heads, True, None)] * (2 * cfg.num_layers)

    def attention_sub_quad(*a, **k):
        raise AssertionError("not used")

    mod.optimized_attention = attention_sub_quad
    assert attn.host_attention() is None
