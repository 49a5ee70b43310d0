"""What a generation needs lives as long as the generation (not as long as the memo's budget allows), each model
runs its own recipe, and only an earlier execution's results make a run's time not fresh."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sdvg_core import (build_report, Engine, EngineConfig, estimate_for_spec, FixedPattern, GenerationSpec,
                       KreaRecipe, Memo, PromptConditioning, PromptSchedule, SelfForcingRecipe, TargetOnly,
                       ThresholdPolicy, TieredMemo, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.derived.keys import key_kind
from sdvg_core.derived.memo import nbytes_of
from sdvg_core.engine.memory import GIB
from sdvg_core.derived.tally import WORK_KEYS
from sdvg_core.io.text import demo_embeddings
from sdvg_core.models.vae import VAE_PRESETS
from sdvg_core.models.wan_config import PRESETS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_scale import PATTERN_6_OF_8  # noqa: E402  (the benchmark's own decision pattern)

pytestmark = pytest.mark.slow  # long runs: hundreds of blocks, full-size memo accounting over every configuration

W, H, BLOCKS = 48, 32, 5
PATTERN = (False, True, False, True, True)  # 3 of 4 drafts accepted after the forced block 0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(blocks: int = BLOCKS, seed: int = 42) -> GenerationSpec:
    return GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), W, H, blocks, seed)


# Bytes each kind of entry has at 832x480 in bf16 (engine/memory.py at full size: a 14B Krea KV window is 7.14
# GiB, the 1.3B's 1.61 GiB, a decoder cache 1.76 GiB, 14B text K/V 0.39 GiB, a block's pixels 27 MiB).
FULL_SIZE_BYTES = {"kv": int(7.14 * GIB), "dcache": int(1.76 * GIB), "draft_decode": int(1.79 * GIB),
                   "text": int(0.39 * GIB), "pixels": 27 << 20, "anchor": 195 << 10, "drafter": 1170 << 10,
                   "target": 1170 << 10, "score": 1 << 10}
FULL_SIZE_MEMO = 2 * GIB  # the engine's and the nodes' default budget before this change


def full_size_bytes(key, value) -> int:
    """The memo's sizer that charges every entry the bytes it would have at 832x480 (a full-size run emulated on tiny models)."""
    return FULL_SIZE_BYTES.get(key_kind(key), nbytes_of(value))


CONFIGS = {
    "target-only": (TargetOnly(), True),
    "reference algorithm (lazy=False)": (FixedPattern(PATTERN), False),
    "this engine": (FixedPattern(PATTERN), True),
    "all-accept": (FixedPattern((False,) + (True,) * (BLOCKS - 1)), True),
    "all-reject": (FixedPattern((False,) * BLOCKS), True),
}
RECIPE_PAIRS = {"krea": (KreaRecipe(), KreaRecipe()), "self_forcing": (SelfForcingRecipe(), SelfForcingRecipe()),
                "drafter self_forcing / target krea": (SelfForcingRecipe(), KreaRecipe()),
                # a 5-frame context reads back 17 pixel frames: more than the newest block holds
                "krea, 5 context frames": (KreaRecipe(context_frames=5), KreaRecipe(context_frames=5))}


def _work(state) -> dict[str, int]:
    return {k: sum(r.work.get(k, 0) for r in state.blocks) for k in WORK_KEYS}


def _run(models, memo, pair, policy, lazy, text_encodes, blocks: int = BLOCKS):
    drafter_recipe, target_recipe = pair
    cfg = EngineConfig(recipe=target_recipe, drafter_recipe=drafter_recipe, lazy=lazy)
    for dit in (models.target, models.drafter):
        dit.encode_text = _counting(dit.encode_text, text_encodes)
    try:
        e = Engine(models.target, models.vae, models.drafter, models.scorer, cfg, memo=memo)
        state = e.generate(_spec(blocks), policy)
    finally:
        for dit in (models.target, models.drafter):
            del dit.encode_text  # back to the class method
    return e, state


def _counting(fn, counter):
    def wrapped(*a, **kw):
        counter.append(1)
        return fn(*a, **kw)
    return wrapped


@pytest.mark.parametrize("pair", list(RECIPE_PAIRS))
def test_full_size_bytes_give_the_work_of_an_unbounded_memo(models, pair):
    """Charging every memo entry its 832x480 bytes (a 7 GiB KV window in a 2 GiB memo) changes no work count:
    decoded frames, VAE encodes, text encodes, forwards and scored frames are those of an unbounded memo, for
    every benchmark configuration. A 0-byte memo does the same."""
    configs = CONFIGS if pair != "krea, 5 context frames" else {"this engine": CONFIGS["this engine"]}
    for name, (policy, lazy) in configs.items():
        counts = {}
        memoiser = [("unbounded", Memo(1 << 40)),
                 ("tiered, full-size bytes", TieredMemo(FULL_SIZE_MEMO, sizer=full_size_bytes))]
        if name == "this engine":
            memoiser += [("one LRU, full-size bytes", Memo(FULL_SIZE_MEMO, sizer=full_size_bytes)), ("0 bytes", Memo(0))]
        for label, memo in memoiser:
            texts: list[int] = []
            e, state = _run(models, memo, RECIPE_PAIRS[pair], policy, lazy, texts)
            counts[label] = {**_work(state), "text_encodes": len(texts)}
            assert memo.pinned_bytes == 0, f"{name}: the generation's held entries outlived it"
            if "full-size" in label:  # the sizer charged them: a 7 GiB KV window is never kept in a 2 GiB memo
                assert memo.kinds().get("kv", 0) == 0 and memo.bytes <= FULL_SIZE_MEMO, (label, memo.kinds())
        for label in counts:
            assert counts[label] == counts["unbounded"], (pair, name, label, counts)
        # each committed block decoded once (an accepted draft's decode is the committed one)
        decoded = counts["unbounded"]["vae_decode_frames"]
        drafts_scored = counts["unbounded"]["scored_frames"] > 0
        assert decoded <= 3 * BLOCKS + (3 * (BLOCKS - 1) if drafts_scored else 0), (name, decoded)


# The recorded table: 9 blocks, 6 of blocks 1-8 accepted (the benchmark's pattern), tiny models; per config the
# decoded frames, text encodes and target forwards of an unbounded memo (Krea recipe)
TINY_COUNTS_KREA = {"target-only": (27, 1, 53), "reference algorithm (lazy=False)": (36, 2, 23),
                    "this engine": (33, 2, 17), "all-reject": (51, 2, 53)}


@pytest.mark.parametrize("recipe", ["krea", "self_forcing"])
def test_full_size_bytes_at_the_benchmarks_nine_blocks(models, recipe):
    """The benchmark's own geometry (9 blocks, 6 of 8 accepted): a memo charged full-size bytes gives exactly the
    unbounded memo's work for every configuration, and for Krea those are the recorded tiny counts."""
    blocks = len(PATTERN_6_OF_8)
    configs = {"target-only": (TargetOnly(), True),
               "reference algorithm (lazy=False)": (FixedPattern(PATTERN_6_OF_8), False),
               "this engine": (FixedPattern(PATTERN_6_OF_8), True),
               "all-accept": (FixedPattern((False,) + (True,) * (blocks - 1)), True),
               "all-reject": (FixedPattern((False,) * blocks), True)}
    for name, (policy, lazy) in configs.items():
        counts = {}
        for label, memo in (("unbounded", Memo(1 << 40)),
                            ("tiered, full-size bytes", TieredMemo(FULL_SIZE_MEMO, sizer=full_size_bytes))):
            texts: list[int] = []
            _, state = _run(models, memo, RECIPE_PAIRS[recipe], policy, lazy, texts, blocks)
            counts[label] = {**_work(state), "text_encodes": len(texts)}
            assert memo.pinned_bytes == 0
        assert counts["tiered, full-size bytes"] == counts["unbounded"], (recipe, name, counts)
        u = counts["unbounded"]
        if recipe == "krea" and name in TINY_COUNTS_KREA:
            assert (u["vae_decode_frames"], u["text_encodes"], u["target_forwards"]) == TINY_COUNTS_KREA[name], name


def test_held_memory_is_bounded_and_released(models):
    """Held entries stay bounded while a long run goes (flat in the block index) and are gone at its end."""
    memo = Memo(0)
    held = []
    e = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo)
    e.generate(_spec(blocks=10), FixedPattern((False,) + (True, False) * 4 + (True,)),
               on_block=lambda eng, st: held.append(memo.pinned_bytes))
    assert max(held[3:]) == max(held[3:6]), held  # no growth after the first blocks
    assert memo.pinned_bytes == 0


def test_each_role_runs_its_own_recipe(models):
    """Drafter and target recipes are independent: the target's blocks equal a target-only run's when every
    draft is rejected, whatever the drafter's recipe; drafts differ with the drafter's recipe; one memo never
    hands one recipe's draft to another."""
    memo = Memo(1 << 40)
    reject_all = FixedPattern((False,) * 4)
    base = Engine(models.target, models.vae, None, None, EngineConfig(), memo=Memo(1 << 30)).generate(
        _spec(blocks=4), TargetOnly())
    drafts = {}
    for name, drafter_recipe in (("krea", KreaRecipe()), ("self_forcing", SelfForcingRecipe())):
        cfg = EngineConfig(recipe=KreaRecipe(), drafter_recipe=drafter_recipe)
        e = Engine(models.target, models.vae, models.drafter, models.scorer, cfg, memo=memo)
        s = e.generate(_spec(blocks=4), reject_all)
        assert torch.equal(s.committed_latents(), base.committed_latents()), name
        st = e.start(_spec(blocks=4))
        st = e.route(st, TargetOnly())
        drafts[name] = e.draft(st).pending.latents
        assert e.recipes["drafter"] == drafter_recipe and e.recipe == KreaRecipe()
    assert not torch.equal(drafts["krea"], drafts["self_forcing"])
    # the step plans differ (Krea 5 calls, Self-Forcing 4 + a commit); both share each block's noise prefix
    assert EngineConfig(recipe=KreaRecipe(), drafter_recipe=SelfForcingRecipe()).num_renoise == 4


def test_reuse_within_one_execution_is_a_fresh_run(models):
    """Block b reusing what the same run computed (the anchor the drafter's context made, used again by the
    target's) is part of a fresh run; a re-run that takes an earlier run's results is not fresh."""
    memo = Memo(1 << 40)
    e = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo)
    policy = FixedPattern((False, True, False, False, True, False))  # rejected blocks after b=1 reuse the anchor
    s = e.generate(_spec(), policy)
    rep = build_report(s, "p", e.recipe, e.recipe.plan.num_steps, wall_seconds=1.0)
    assert any("anchor" in b.reused for b in s.blocks)  # reuse happened inside the run ...
    assert rep.fresh_run and not any(b.carried for b in rep.blocks)  # ... and the time is still a fresh run's
    assert "NOT a fresh run" not in rep.table()
    again = e.generate(_spec(), ThresholdPolicy(tau=float("-inf")))
    rep2 = build_report(again, "p", e.recipe, e.recipe.plan.num_steps, wall_seconds=1.0)
    assert not rep2.fresh_run and any(b.carried for b in rep2.blocks)
    assert "NOT a fresh run" in rep2.table()
    assert again.blocks[0].run_id == again.blocks[-1].run_id != s.blocks[0].run_id  # one id per start


def test_memory_estimate_counts_what_the_generation_holds():
    """The estimate's peak is the largest phase plus what is held through every phase: each model's KV buffer is
    held for the run (one per run and model, reused by every block: Krea's rebuild writes into it too), Self-Forcing's
    the size of the whole video; recipes state their own needs."""
    spec = GenerationSpec(PromptConditioning.make("p", torch.zeros(1, 4, 4096)), 832, 480, 9, 0)
    dits = [(PRESETS["wan2.1-t2v-14b"], torch.bfloat16), (PRESETS["wan2.1-t2v-1.3b"], torch.bfloat16)]
    vae = VAE_PRESETS["wan2.1-vae"]
    krea = estimate_for_spec(spec, KreaRecipe(), dits, vae, torch.bfloat16)
    mixed = estimate_for_spec(spec, [KreaRecipe(), SelfForcingRecipe()], dits, vae, torch.bfloat16)
    t, d = krea.dits
    assert krea.held == t.text_kv + d.text_kv + t.kv + d.kv + 2 * krea.vae_cache + krea.draft_pixels
    assert krea.peak == t.weights + t.activations + krea.held
    assert mixed.dits[1].kv_held and mixed.dits[0].kv_held
    assert mixed.held == krea.held - d.kv + mixed.dits[1].kv  # the drafter's whole-video cache instead of its window
    assert mixed.dits[1].kv == d.kv * 27 // 6  # 27 latent frames against Krea's 6
    assert krea.host_pixels == 12 * 3 * 480 * 832 * 2  # Krea's 9-frame anchor history lies in the newest block
    assert KreaRecipe().query_frames(3) == 3 and KreaRecipe(context_frames=5).query_frames(3) == 5


def test_requeue_after_moving_tau_on_a_long_video_recomputes_only_from_the_first_flip(models):
    """A re-queue at another tau on a long video, with full-size bytes charged to the memo (nothing big fits):
    no forward and no scoring before the first flipped block, one decode per committed block (the held decoder
    cache moves on block by block, never back to the start), the same bits as a fresh run, and the fresh-run
    cost of every block unchanged."""
    blocks, flip = 30, 20
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 16, 16, blocks, 3)
    first_pattern = (False,) + ((True, True, False) * blocks)[:blocks - 1]  # rejected drafts in the prefix too
    assert first_pattern[flip]
    second_pattern = first_pattern[:flip] + (False,) + first_pattern[flip + 1:]
    memo = TieredMemo(FULL_SIZE_MEMO, sizer=full_size_bytes)  # the engine's and the nodes' default layout
    e = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo)
    first = e.generate(spec, FixedPattern(first_pattern))
    again = e.generate(spec, FixedPattern(second_pattern))
    fw = [r.work["drafter_forwards"] + r.work["target_forwards"] for r in again.blocks]
    assert fw[:flip] == [0] * flip and all(f > 0 for f in fw[flip:]), fw
    assert all(r.work["scored_frames"] == 0 for r in again.blocks[:flip])
    assert [r.work["vae_decode_frames"] for r in again.blocks[:flip]] == [3] * flip  # the commit's decode only
    fresh = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig()).generate(
        spec, FixedPattern(second_pattern))
    assert torch.equal(again.committed_latents(), fresh.committed_latents())
    assert [dict(r.cost) for r in again.blocks] == [dict(r.cost) for r in fresh.blocks]
    assert all(torch.equal(a.latents, b.latents) for a, b in zip(first.blocks[:flip], again.blocks[:flip]))


@pytest.mark.parametrize("drafter_recipe", ["krea", "longlive"])
def test_requeue_after_moving_tau_on_a_100_block_video(models, drafter_recipe):
    """docs/long-video.md: a 100-block video, re-queued with its first flipped decision at block 80 and the
    engine's default memo: no forward, no decode and no scoring before block 80; at block 80 only the target works
    (the draft is the first run's); after it the drafter does exactly the first run's work (a LongLive ring
    included: its view at block 80 comes from the memo's snapshot)."""
    from sdvg_core import LongLiveRecipe

    blocks, flip = 100, 80
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 16, 16, blocks, 3)
    first_pattern = (False,) + ((True, True, False) * blocks)[:blocks - 1]
    assert first_pattern[flip]
    second_pattern = first_pattern[:flip] + (False,) + first_pattern[flip + 1:]
    drafter = LongLiveRecipe() if drafter_recipe == "longlive" else KreaRecipe()
    e = Engine(models.target, models.vae, models.drafter, models.scorer,
               EngineConfig(recipe=KreaRecipe(), drafter_recipe=drafter))
    first = e.generate(spec, FixedPattern(first_pattern))
    again = e.generate(spec, FixedPattern(second_pattern))
    before = {k: sum(r.work[k] for r in again.blocks[:flip]) for k in WORK_KEYS}
    assert set(before.values()) == {0}, before
    at = again.blocks[flip]  # the draft is the first run's (same prefix, same noise): only the target works
    assert at.producer == "target" and at.work["drafter_forwards"] == at.work["scored_frames"] == 0
    assert at.work["target_forwards"] > 0
    drafter_keys = ("drafter_forwards", "drafter_context_forwards", "scored_frames")
    later = {k: sum(r.work[k] for r in again.blocks[flip + 1:]) for k in drafter_keys}
    first_later = {k: sum(r.work[k] for r in first.blocks[flip + 1:]) for k in drafter_keys}
    assert later == first_later
    assert [r.decision for r in again.blocks[flip + 1:]] == [r.decision for r in first.blocks[flip + 1:]]


def test_four_hundred_blocks_end_to_end(models):
    """A 400-block video (1200 latent frames: LongLive's absolute RoPE positions pass the references' 1024-frame
    table) with a LongLive drafter and the Krea target regenerating every fifth block (its anchor re-encoded from
    decoded pixels far past block 9): the same work per block from start to end, no KV copy, held memory flat."""
    from sdvg_core import LongLiveRecipe
    from sdvg_core.models.kv_cache import KVCopyStats

    blocks = 400
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 16, 16, blocks, 5)
    cfg = EngineConfig(recipe=KreaRecipe(), drafter_recipe=LongLiveRecipe())
    copies = KVCopyStats()
    e = Engine(models.target, models.vae, models.drafter, None, cfg, kv_copies=copies)
    held = []
    pattern = tuple(b % 5 != 0 for b in range(blocks))
    state = e.generate(spec, FixedPattern(pattern, score_drafts=False),
                       on_block=lambda eng, st: held.append(eng.memo.pinned_bytes))
    assert state.done and len(state.blocks) == blocks
    assert copies.forks == 0  # a linear run never copies a KV buffer
    work = {}
    for r in state.blocks[10:]:  # after the cache filled: one work profile per kind of block, whatever b
        work.setdefault(r.producer, set()).add(tuple(sorted(r.work.items())))
    assert all(len(v) == 1 for v in work.values()), work
    assert max(held[10:]) == max(held[10:20]), "held memory grew with the video's length"
    assert torch.isfinite(state.blocks[-1].latents).all()


def test_requeue_with_a_windowed_drafter_restarts_from_the_flip_not_block_zero(models):
    """A LongLive drafter's ring is overwritten in place as the video goes on; the memo keeps a snapshot of each
    block's view when its budget can, so a re-queue at another tau commits only from the flipped block (not the
    whole chain from block 0) and still equals a fresh run."""
    from sdvg_core import LongLiveRecipe

    blocks, flip = 24, 16
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 16, 16, blocks, 9)
    cfg = EngineConfig(recipe=KreaRecipe(), drafter_recipe=LongLiveRecipe())
    first_pattern = (False,) + (True,) * (blocks - 1)
    second_pattern = first_pattern[:flip] + (False,) + first_pattern[flip + 1:]
    e = Engine(models.target, models.vae, models.drafter, None, cfg)
    e.generate(spec, FixedPattern(first_pattern, score_drafts=False))
    again = e.generate(spec, FixedPattern(second_pattern, score_drafts=False))
    ctx = [r.work["drafter_context_forwards"] for r in again.blocks]
    assert sum(ctx[:flip + 1]) == 0 and ctx[flip + 1] == 1, ctx  # block flip+1 commits the target's block once
    fresh = Engine(models.target, models.vae, models.drafter, None, cfg).generate(
        spec, FixedPattern(second_pattern, score_drafts=False))
    assert torch.equal(again.committed_latents(), fresh.committed_latents())
    assert [dict(r.cost) for r in again.blocks] == [dict(r.cost) for r in fresh.blocks]


def test_memory_estimate_counts_a_recache_at_a_prompt_switch():
    """A global Self-Forcing cache recaches every generated frame in one call at a switch: the estimate's
    activations follow; Krea's rebuild does not grow."""
    p = PromptConditioning.make("p", torch.zeros(1, 4, 4096))
    one = GenerationSpec(p, 832, 480, 9, 0)
    switched = GenerationSpec(PromptSchedule.of([(0, p), (4, PromptConditioning.make("q", torch.ones(1, 4, 4096)))]), 832,
                              480, 9, 0)
    dits = [(PRESETS["wan2.1-t2v-1.3b"], torch.bfloat16)]
    vae = VAE_PRESETS["wan2.1-vae"]
    sf = [estimate_for_spec(s, SelfForcingRecipe(), dits, vae, torch.bfloat16).dits[0] for s in (one, switched)]
    assert sf[0].query_tokens == 3 * 1560 and sf[1].query_tokens == 27 * 1560
    kr = [estimate_for_spec(s, KreaRecipe(), dits, vae, torch.bfloat16).dits[0] for s in (one, switched)]
    assert kr[0].query_tokens == kr[1].query_tokens == 3 * 1560
