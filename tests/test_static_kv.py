"""Static-shape KV: one KV buffer per run and role, reused by every block; attention over a fixed
span of it with the empty slots masked as data (models/kv_cache.py), equal to attention over the occupied prefix;
the mask reaches an injected kernel only when it takes one."""
from __future__ import annotations

import pytest
import torch

from sdvg_core import (CausalWan, Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, LongLiveRecipe,
                       PromptConditioning, SelfForcingRecipe, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.engine.prompts import PromptSchedule
from sdvg_core.sampling.timesteps import timestep_tensor
from sdvg_core.io.text import demo_embeddings
from sdvg_core.models import kv_cache
from sdvg_core.models.kv_cache import KVCache, KVCopyStats, attention_span
from sdvg_core.models.wan import attention, build_random
from sdvg_core.models.wan_config import PRESETS

RECIPES = {"krea": KreaRecipe(), "self_forcing": SelfForcingRecipe(), "longlive": LongLiveRecipe(window=9),
           "longlive_infinity": LongLiveRecipe(window=9, variant="infinity")}
EXACT = 1e-6  # masked attention over the padded span equals the prefix attention to fp32 rounding


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(blocks: int, switch_at: int | None = None) -> GenerationSpec:
    first = PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32))
    if switch_at is None:
        return GenerationSpec(first, 32, 32, blocks, 5)
    other = PromptConditioning.make("another prompt", demo_embeddings("another prompt", 32))
    return GenerationSpec(PromptSchedule.of([(0, first), (switch_at, other)]), 32, 32, blocks, 5)


def test_attention_span_halves_down_to_the_occupied_slots():
    assert [attention_span(e, 12) for e in (1, 2, 3, 4, 6, 7, 9, 12)] == [1, 2, 3, 6, 6, 12, 12, 12]
    assert [attention_span(e, 6) for e in (3, 4, 6)] == [3, 6, 6]  # Krea: block 0 alone, then the full window
    spans = {attention_span(e, 900) for e in range(1, 901)}  # a 300-block whole-video cache: a few shapes
    assert len(spans) <= 11 and max(spans) == 900
    assert all(attention_span(e, 900) < 2 * e + 2 for e in range(1, 901))  # never much more than the occupied


def test_masked_attention_over_the_padded_span_equals_prefix_attention():
    """The kernel: keys past the occupied slots (garbage, huge) or in a hole change nothing once masked."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 6, 8, generator=gen)
    k, v = torch.randn(1, 2, 20, 8, generator=gen), torch.randn(1, 2, 20, 8, generator=gen)
    k[:, :, 12:], v[:, :, 12:] = 1e4, -1e4  # what a stale or empty slot may hold
    keep = torch.zeros(20, dtype=torch.bool)
    keep[:4], keep[8:12] = True, True  # occupied slots with a hole (an evicted window block)
    mask = torch.zeros(1, 1, 1, 20).masked_fill(~keep, kv_cache.MASKED)
    ref = attention(q, k[:, :, keep], v[:, :, keep])
    assert (attention(q, k, v, mask) - ref).abs().max().item() <= EXACT
    assert (attention(q, k, v) - ref).abs().max().item() > 1.0  # unmasked, the padding would dominate


def _dropping(calls: list):
    """Reference attention: the masked keys dropped (attention over the occupied slots only, unmasked)."""
    def attend(q, k, v, mask=None):
        calls.append(mask is not None)
        if mask is not None:
            keep = mask[0, 0, 0] == 0
            k, v = k[:, :, keep], v[:, :, keep]
        return attention(q, k, v)
    return attend


@pytest.mark.parametrize("rope", ["baked", "slot"])
def test_forward_over_the_masked_span_equals_the_occupied_slots_alone(rope):
    """The model: a growing cache (spans 3, 5 masked, 9), an evicted window block (a hole): every call equals the same
    call attending only to the occupied slots, to fp32 rounding."""
    cfg = PRESETS["tiny"]
    net = build_random(cfg, 1)
    gen = torch.Generator().manual_seed(1)
    text_in, x = torch.randn(1, 8, cfg.text_dim, generator=gen), torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)
    seen: list[bool] = []
    run, ref = CausalWan(net, cfg), CausalWan(net, cfg, attention_fn=_dropping(seen))
    text = run.encode_text(text_in)
    kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32, rope=rope)
    worst = 0.0
    for j in range(4):
        if j == 3:
            kv = kv.evict(3)  # frames 3-5 leave: their slots become a hole inside the span
        t = timestep_tensor(700.0, 1, 3)
        a = run.forward(x + j, t, text, kv=kv.clone(), frame_offset=3 * j).flow
        b = ref.forward(x + j, t, text, kv=kv.clone(), frame_offset=3 * j).flow
        worst = max(worst, (a - b).abs().max().item())
        kv = run.forward(x + j, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True, frame_offset=3 * j).kv
    assert True in seen and False in seen  # masked and unmasked calls both compared
    assert worst <= EXACT, worst


def test_a_kernel_without_a_mask_keyword_never_gets_a_masked_call():
    """A 3-tensor kernel (a host's) serves the unmasked calls; a masked one runs on SDPA; a kernel with `mask=`
    gets the mask. Outputs equal the default path's in every case."""
    cfg = PRESETS["tiny"]
    net = build_random(cfg, 2)
    gen = torch.Generator().manual_seed(2)
    text_in, x = torch.randn(1, 8, cfg.text_dim, generator=gen), torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)
    plain, masked_calls = [], []

    def three(q, k, v):
        plain.append(k.shape[2])
        return attention(q, k, v)

    def with_mask(q, k, v, mask=None):
        masked_calls.append(mask is not None)
        return attention(q, k, v, mask)

    outs = {}
    for name, fn in (("default", None), ("three", three), ("with_mask", with_mask)):
        run = CausalWan(net, cfg, attention_fn=fn)
        text = run.encode_text(text_in)
        kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
        kv = run.forward(x, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True).kv  # 3 frames: span 3, full
        outs[name] = run.forward(x, timestep_tensor(700.0, 1, 3), text, kv=kv, frame_offset=3).flow  # 6 of span 9
    layers = cfg.num_layers
    assert plain.count(9 * 6) == 0 and plain.count(3 * 6) == layers  # the masked span never reached it
    assert len(plain) == 2 * layers + layers  # the unmasked call: self + cross; the masked one: cross only
    assert masked_calls.count(True) == layers
    assert torch.equal(outs["three"], outs["default"]) and torch.equal(outs["with_mask"], outs["default"])


def _storages(monkeypatch) -> list[tuple[int, int, int]]:
    """Per KV write a forward opens: (KV storage pointer of layer 0, the write index's, the mask's)."""
    log: list[tuple[int, int, int]] = []
    inputs = kv_cache.OpenKVWrite.inputs

    def spy(self):
        got = inputs(self)
        log.append((self.buffer.k[0].untyped_storage().data_ptr(), got.index.untyped_storage().data_ptr(),
                    -1 if got.mask is None else got.mask.untyped_storage().data_ptr()))
        return got

    monkeypatch.setattr(kv_cache.OpenKVWrite, "inputs", spy)
    return log


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RECIPES))
def test_a_run_keeps_one_kv_storage_per_role_after_its_first_block(models, name, monkeypatch):
    """Every call of a run writes and attends into one KV storage per role, allocated at its first block: Krea's
    per-block rebuild included (it writes into the run's buffer), a prompt switch's recache too; the write index and
    mask keep one storage per call shape. A re-queue restores Krea's memoised clone into its own buffer."""
    log = _storages(monkeypatch)
    copies = KVCopyStats()
    e = Engine(models.target, models.vae, models.drafter, None,
               EngineConfig(recipe=RECIPES[name], memo_bytes=1 << 30), kv_copies=copies)
    pattern = (False, True, False, True, False, False, True)
    per_block: list[list[tuple[int, int, int]]] = []

    def on_block(_e, _s):
        per_block.append(log[:])
        log.clear()

    e.generate(_spec(len(pattern), switch_at=4), FixedPattern(pattern, score_drafts=False), on_block=on_block)
    drafter_kv = {ptr for calls in per_block[1:] for ptr, _, _ in calls}  # two roles: drafter's from block 1
    assert len(drafter_kv) == 2, drafter_kv  # one storage per role, whatever the block
    assert {ptr for ptr, _, _ in per_block[0]} <= drafter_kv
    if name != "self_forcing":  # a windowed cache's last block makes no call shape it had not made: no new statics
        before = {(index, mask) for calls in per_block[:-1] for _, index, mask in calls}
        assert {(index, mask) for _, index, mask in per_block[-1]} <= before
    assert copies.forks == 0 and copies.restores == 0
    if name == "krea":  # a re-queue (reference work: the target's context is built every block, memoised as clones)
        e = Engine(models.target, models.vae, models.drafter, None,
                   EngineConfig(recipe=RECIPES[name], memo_bytes=1 << 30, lazy=False), kv_copies=copies)
        e.generate(_spec(len(pattern)), FixedPattern(pattern, score_drafts=False))
        per_block.clear()
        again = pattern[:3] + (False,) + pattern[4:]  # block 3 rejected now: the target needs its context there
        e.generate(_spec(len(again)), FixedPattern(again, score_drafts=False), on_block=on_block)
        assert copies.restores >= 1 and copies.forks == 0  # the memo's clone put back into the run's buffer
        assert len({ptr for calls in per_block[1:] for ptr, _, _ in calls}) == 2
