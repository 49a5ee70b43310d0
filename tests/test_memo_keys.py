"""Memo keys, guarded from the outside: two computations share a cached result only if they are the same.

Each test runs two generations that differ in one identity (seed, prompt, size, model, recipe, VAE, decode rule,
noise source, scorer, history) on one engine or on engines sharing one memo, and checks that the second equals a
fresh engine's run bit for bit. Dropping that identity from a memo key (or from the lineage) makes the second
run take the first one's cached result, and the test fails. docs/testing-more.md lists which test
catches which dropped field.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from sdvg_core import (BlockNoise, DraftOnly, Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe,
                       LongLiveRecipe, Memo, PromptConditioning, PromptSchedule, SelfForcingRecipe, TargetOnly,
                       ThresholdPolicy, block_noise, recipe_by_name, tiny_models)

W, H, BLOCKS = 48, 32, 4  # 4 Krea blocks: block 2 and 3 use the VAE re-encoded anchor
MEMO = 256 << 20  # large enough that nothing is evicted (an eviction would hide a wrong hit)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab0"))


@pytest.fixture(scope="module")
def others(tmp_path_factory):
    """A second set of tiny models of the same shapes with other weights (other keys)."""
    return tiny_models(seed=10, workdir=tmp_path_factory.mktemp("vocab10"))


def _emb(seed: int) -> torch.Tensor:
    return torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(seed))


def _spec(seed: int = 42, blocks: int = BLOCKS, w: int = W, h: int = H, text: str = "a red fox in the snow",
          emb_seed: int = 1, frames_per_block: int = 3, prompt: PromptConditioning | None = None,
          switches: tuple = ()) -> GenerationSpec:
    prompt = prompt or PromptConditioning.make(text, _emb(emb_seed))
    return GenerationSpec(PromptSchedule.of(((0, prompt),) + switches), w, h, blocks, seed,
                          frames_per_block=frames_per_block)


def _engine(target, vae, drafter=None, scorer=None, memo=None, noise_fn=None, **cfg) -> Engine:
    return Engine(target, vae, drafter, scorer, EngineConfig(memo_bytes=MEMO, **cfg), noise_fn=noise_fn, memo=memo)


def _same_as_fresh(engine: Engine, fresh: Engine, spec: GenerationSpec, policy) -> None:
    """`engine` (which ran something else first) gives exactly what a fresh engine gives for (spec, policy)."""
    got, want = engine.generate(spec, policy), fresh.generate(spec, policy)
    assert [r.decision for r in got.blocks] == [r.decision for r in want.blocks]
    assert [r.frame_scores for r in got.blocks] == [r.frame_scores for r in want.blocks]
    assert torch.equal(got.committed_latents(), want.committed_latents())
    assert torch.equal(engine.frames(got), fresh.frames(want))


SDVG = ThresholdPolicy(tau=-1e9)  # every draft drafted, decoded, scored and kept: all derived data is made


# ---------------------------------------------------------------------------------------------------------
# What identifies a generation: seed, prompt, size, block geometry
# ---------------------------------------------------------------------------------------------------------

# not slow although over a second: a memo key's guard end to end stays in the quick loop
@pytest.mark.parametrize("policy", [TargetOnly(), SDVG], ids=["target-only", "sdvg"])
def test_two_seeds_on_one_engine_never_share_a_cached_video(models, policy):
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer)
    a = e.generate(_spec(seed=7), policy)
    b = e.generate(_spec(seed=8), policy)
    fresh_e = _engine(m.target, m.vae, m.drafter, m.scorer)
    fresh_b = fresh_e.generate(_spec(seed=8), policy)
    assert torch.equal(e.frames(b), fresh_e.frames(fresh_b))
    assert torch.equal(b.committed_latents(), fresh_b.committed_latents())
    assert [r.reused for r in b.blocks] == [r.reused for r in fresh_b.blocks]  # nothing taken from seed 7's run
    fa, fb = e.frames(a), e.frames(b)
    assert all(not torch.equal(x, y) for x, y in zip(fa, fb))  # every frame differs
    assert all(not torch.equal(x.latents, y.latents) for x, y in zip(a.blocks, b.blocks))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_another_prompt_on_one_engine(models, recipe):
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe)
    e.generate(_spec(text="a red fox", emb_seed=1), SDVG)
    for other in (_spec(text="a blue whale", emb_seed=2),  # other text and embeddings
                  _spec(text="a red fox", emb_seed=3)):  # same text, other embeddings
        _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe), other, SDVG)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_another_prompt_schedule_on_one_engine(models, recipe):
    """Schedules that agree up to a switch share that prefix, and nothing from the switch on."""
    m = models
    fox, whale, frog = (PromptConditioning.make(t, _emb(s)) for t, s in (("a red fox", 1), ("a blue whale", 2),
                                                                             ("a green frog", 3)))
    whale_text = PromptConditioning("a blue whale at night", whale.embeddings, key=whale.key)  # same embeddings
    e = _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe)
    e.generate(_spec(prompt=fox, switches=((2, whale),)), SDVG)
    for switches in (((2, frog),), ((1, whale),), ((3, whale),), (), ((2, whale_text),)):
        _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe),
                       _spec(prompt=fox, switches=switches), SDVG)


@pytest.mark.slow
def test_same_embeddings_other_text_gets_its_own_scores(models):
    """A host may key a prompt by its embeddings alone (PromptConditioning.key); ImageReward reads the text."""
    m, emb = models, _emb(1)
    e = _engine(m.target, m.vae, m.drafter, m.scorer)
    e.generate(_spec(prompt=PromptConditioning("a red fox", emb, key="emb-1")), SDVG)
    other = _spec(prompt=PromptConditioning("a blue whale", emb, key="emb-1"))
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer), other, SDVG)


@pytest.mark.slow
def test_another_size_on_one_engine(models):
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer)
    e.generate(_spec(), SDVG)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer), _spec(w=64), SDVG)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer), _spec(h=48), SDVG)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_another_block_count_or_block_length_on_one_engine(models, recipe):
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe)
    e.generate(_spec(blocks=2), SDVG)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe), _spec(blocks=BLOCKS), SDVG)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe), _spec(frames_per_block=2), SDVG)


# ---------------------------------------------------------------------------------------------------------
# What computes it: models, recipe, VAE and decode rule, noise source, scorer (engines sharing one memo)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_another_target_sharing_the_memo(models, others):
    m, o = models, others
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), TargetOnly())
    e = _engine(o.target, m.vae, m.drafter, m.scorer, memo=memo)
    _same_as_fresh(e, _engine(o.target, m.vae, m.drafter, m.scorer), _spec(), TargetOnly())


@pytest.mark.slow
def test_another_drafter_sharing_the_memo(models, others):
    m, o = models, others
    memo = Memo(MEMO)
    pol = DraftOnly()  # block 0 drafted too: every block is the drafter's
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), pol)
    e = _engine(m.target, m.vae, o.drafter, m.scorer, memo=memo)
    _same_as_fresh(e, _engine(m.target, m.vae, o.drafter, m.scorer), _spec(), pol)


@pytest.mark.slow
def test_the_same_model_as_drafter_and_target(models):
    """Self-speculation (one model in both roles): the role keeps their results and counted costs apart."""
    m = models
    e = _engine(m.target, m.vae, m.target, m.scorer)
    pat = FixedPattern((False, True, False, True))
    e.generate(_spec(), DraftOnly())
    fresh = _engine(m.target, m.vae, m.target, m.scorer)
    got, want = e.generate(_spec(), pat), fresh.generate(_spec(), pat)
    assert torch.equal(got.committed_latents(), want.committed_latents())
    assert [dict(r.cost) for r in got.blocks] == [dict(r.cost) for r in want.blocks]


@pytest.mark.slow
@pytest.mark.parametrize("first,second", [
    (KreaRecipe(), KreaRecipe(anchor=False)),  # same plan and window, another context rule from block 2 on
    (KreaRecipe(), SelfForcingRecipe()),
    (KreaRecipe(), KreaRecipe(num_steps=4)),
    # parameters given by name (--drafter-recipe longlive:window=6): the window evicts from block 2 on
    (LongLiveRecipe(), recipe_by_name("longlive:window=6")),
    (recipe_by_name("longlive:window=6"), recipe_by_name("longlive:window=6,sink=0")),
    (recipe_by_name("longlive:window=6"), recipe_by_name("longlive_infinity:window=6")),
], ids=["anchor-off", "self-forcing", "4-steps", "longlive-window", "longlive-sink", "longlive-variant"])
def test_another_recipe_sharing_the_memo(models, first, second):
    m = models
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo, recipe=first).generate(_spec(), SDVG)
    e = _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo, recipe=second)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=second), _spec(), SDVG)


@pytest.mark.slow
def test_roles_with_different_anchor_frames_in_one_engine(models):
    """Drafter and target under Krea recipes with 3 and 2 context frames re-encode different pixel frames as their
    anchor for the same history: the target must not take the drafter's (drafted first, then rejected)."""
    m = models
    mixed = _engine(m.target, m.vae, m.drafter, m.scorer, drafter_recipe=KreaRecipe(context_frames=3),
                    target_recipe=KreaRecipe(context_frames=2))
    got = mixed.generate(_spec(), FixedPattern((False,) * BLOCKS))  # every block drafted, then the target's
    assert all(r.work["drafter_forwards"] > 0 for r in got.blocks[1:])
    want = _engine(m.target, m.vae, m.drafter, m.scorer, recipe=KreaRecipe(context_frames=2)).generate(_spec(), TargetOnly())
    assert torch.equal(got.committed_latents(), want.committed_latents())


def test_another_vae_sharing_the_memo(models, others):
    """The VAE decodes the committed pixels and (Krea, block >= 2) the anchor the context is built from."""
    m, o = models, others
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), SDVG)
    e = _engine(m.target, o.vae, m.drafter, m.scorer, memo=memo)
    _same_as_fresh(e, _engine(m.target, o.vae, m.drafter, m.scorer), _spec(), SDVG)


@pytest.mark.slow
def test_another_decode_rule_sharing_the_memo(models):
    m = models
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), SDVG)
    e = _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo, decode_rule="krea")
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, decode_rule="krea"), _spec(), SDVG)


@dataclass(frozen=True)
class ShiftedNoise:
    """A custom noise source (another seed's noise for every block) with the stable `key` a shared memo needs."""

    key: str = "shifted-noise"

    def __call__(self, spec: GenerationSpec, b: int) -> BlockNoise:
        h, w = spec.latent_hw
        return block_noise(spec.seed + 1000, b, (1, spec.frames_per_block, 16, h, w), 4)


@pytest.mark.slow
def test_another_noise_source_sharing_the_memo(models):
    m = models
    assert m.target.cfg.in_dim == 16
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), SDVG)
    e = _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo, noise_fn=ShiftedNoise())
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, noise_fn=ShiftedNoise()), _spec(), SDVG)


def test_another_scorer_sharing_the_memo(models, others):
    m, o = models, others
    memo = Memo(MEMO)
    _engine(m.target, m.vae, m.drafter, m.scorer, memo=memo).generate(_spec(), SDVG)
    e = _engine(m.target, m.vae, m.drafter, o.scorer, memo=memo)
    _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, o.scorer), _spec(), SDVG)


# ---------------------------------------------------------------------------------------------------------
# Which history: lineage of the committed blocks
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_other_decisions_on_one_engine(models, recipe):
    """Histories that part at block 1 (drafter's vs target's block) share nothing after it."""
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe)
    e.generate(_spec(), FixedPattern((False, True, True, True)))
    for pat in ((False, False, True, True), (False, True, False, True), (False, False, False, False)):
        _same_as_fresh(e, _engine(m.target, m.vae, m.drafter, m.scorer, recipe=recipe), _spec(), FixedPattern(pat))


def test_the_video_is_the_one_shot_decode_of_its_latents_and_scores_are_its_frames(models):
    """Every committed block's pixels and every kept draft's scores belong to that block (no key collides
    between blocks of one run): the frames equal a one-shot VAE decode of all committed latents, and each
    accepted block's recorded frame scores equal ImageReward on its frames of the video."""
    m = models
    e = _engine(m.target, m.vae, m.drafter, m.scorer)
    s = e.generate(_spec(), SDVG)
    z = s.committed_latents().permute(0, 2, 1, 3, 4)  # [1, C, T, h, w]
    one_shot = (m.vae.decode(z).clamp(-1, 1)[0].float() * 0.5 + 0.5).permute(1, 2, 3, 0)  # [T, H, W, 3]
    frames = e.frames(s)
    assert frames.shape == one_shot.shape
    assert (frames - one_shot).abs().max().item() <= 1e-6
    start = 0
    for r in s.blocks:
        n = m.vae.config.pixel_frames(3) if r.index == 0 else 4 * 3
        if r.decision == "accepted":
            got = m.scorer.score_frames(frames[start:start + n], "a red fox in the snow")
            assert r.frame_scores == tuple(float(x) for x in got)
        start += n
    assert start == frames.shape[0]
    assert len({r.frame_scores for r in s.blocks[1:]}) == BLOCKS - 1


def test_the_root_lineage_names_every_field_of_the_request():
    """The history every block's lineage starts from differs whenever the request does: prompt, size, block count,
    seed (later blocks also hash their own prompt, so only this test sees a root that forgets the prompt)."""
    from sdvg_core.engine.state import GenerationState, PromptConditioning

    emb = torch.zeros(1, 4, 8)
    base = dict(width=64, height=48, num_blocks=3, seed=0)
    spec = GenerationSpec(PromptConditioning.make("a cat", emb), **base)
    others = [GenerationSpec(PromptConditioning.make("a dog", emb), **base),
              GenerationSpec(PromptConditioning.make("a cat", emb + 1), **base),
              GenerationSpec(PromptConditioning.make("a cat", emb), **{**base, "width": 80}),
              GenerationSpec(PromptConditioning.make("a cat", emb), **{**base, "num_blocks": 4}),
              GenerationSpec(PromptConditioning.make("a cat", emb), **{**base, "seed": 1})]
    root = GenerationState(spec).lineage
    assert root == GenerationState(GenerationSpec(PromptConditioning.make("a cat", emb), **base)).lineage
    assert all(GenerationState(o).lineage != root for o in others)
