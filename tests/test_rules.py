"""The SDVG routing rule, guarded: a draft is kept iff min over its frames of ImageReward >= tau.

Every test here fails under a one-token change of the rule (`>=` -> `>`, min -> mean, block 0 no longer forced,
tau = +/-inf or `needs_score` ignored, lazy=False no longer drafting block 0, ...); docs/testing-more.md
lists which test catches which change. Engine tests use a scorer stand-in whose per-frame scores the
test chooses, so the boundary cases are exact, not whatever random weights happen to give.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

from sdvg_core import (DraftOnly, Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, PromptConditioning,
                       RandomPolicy, SelfForcingRecipe, TargetOnly, ThresholdPolicy, aggregate, tiny_models)

W, H, BLOCKS = 48, 32, 3
GOOD, BAD = 1.0, -2.0  # per-frame scores of the stand-in; exactly representable in float32
TAU_BETWEEN = 0.0  # above the bad frame, below the mean of a block with one bad frame among 12 good ones


@dataclass
class StandInScorer:
    """A scorer with chosen per-frame scores: frame i of every draft gets `scores(n)[i]`; records its calls."""

    scores: Callable[[int], list[float]]
    key: str = "stand-in-scorer"
    calls: list = field(default_factory=list)

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        self.calls.append(frames.shape[0])
        return torch.tensor(self.scores(frames.shape[0]), dtype=torch.float32)


def one_bad_frame(n: int) -> list[float]:
    """All frames GOOD but one (the middle one) BAD: min = BAD, mean well above TAU_BETWEEN."""
    return [BAD if i == n // 2 else GOOD for i in range(n)]


def flat(value: float, low: float | None = None):
    """Every frame `value`, one frame `low` (the block's min) when given."""
    return lambda n: [low if (low is not None and i == n - 1) else value for i in range(n)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(seed: int = 42, blocks: int = BLOCKS) -> GenerationSpec:
    emb = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1))
    return GenerationSpec(PromptConditioning.make("a red fox in the snow", emb), W, H, blocks, seed)


def _engine(m, scorer, **cfg) -> Engine:
    return Engine(m.target, m.vae, m.drafter, scorer, EngineConfig(**cfg))


# ---------------------------------------------------------------------------------------------------------
# The policy on its own
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [-0.7, 0.0, 1.5, -1e-30])
def test_threshold_accepts_a_score_equal_to_tau(tau):
    pol = ThresholdPolicy(tau=tau)
    assert pol.accept(1, tau) is True
    assert pol.accept(1, math.nextafter(tau, math.inf)) is True
    assert pol.accept(1, math.nextafter(tau, -math.inf)) is False


def test_threshold_aggregates_by_min_by_default():
    scores = one_bad_frame(12)
    assert ThresholdPolicy().aggregation == "min"
    assert aggregate(scores, "min") == BAD
    assert aggregate(scores, "mean") == pytest.approx(sum(scores) / 12)
    assert aggregate([0.5], "min") == aggregate([0.5], "mean") == 0.5


def test_one_bad_frame_rejects_the_block_on_the_policy():
    scores = one_bad_frame(12)
    assert BAD < TAU_BETWEEN < sum(scores) / len(scores)
    sdvg = ThresholdPolicy(tau=TAU_BETWEEN)
    assert sdvg.accept(1, aggregate(scores, sdvg.aggregation)) is False
    mean = ThresholdPolicy(tau=TAU_BETWEEN, aggregation="mean")
    assert mean.accept(1, aggregate(scores, mean.aggregation)) is True


def test_threshold_policy_branches():
    pol = ThresholdPolicy(tau=-0.7)
    assert pol.forced(0) and not pol.forced(1) and not pol.forced(7)
    assert not pol.needs_score(0) and pol.needs_score(1)
    assert pol.accept(0, 99.0) is False  # block 0 goes to the target whatever its score
    assert pol.accept(1, None) is False  # no score, no acceptance at a finite tau
    free = ThresholdPolicy(tau=-0.7, force_reject_first=False)
    assert not free.forced(0) and free.needs_score(0) and free.accept(0, 0.0)
    inf = ThresholdPolicy(tau=math.inf)  # the target makes every block; nothing is drafted or scored
    assert all(inf.forced(b) and not inf.needs_score(b) and not inf.accept(b, 1e30) for b in range(4))
    minf = ThresholdPolicy(tau=-math.inf)  # every draft kept without scoring; block 0 still forced
    assert minf.forced(0) and not minf.forced(1)
    assert not minf.needs_score(1) and minf.accept(1, None) is True and minf.accept(0, None) is False


def test_baseline_policy_branches():
    t = TargetOnly()
    assert all(t.forced(b) and not t.needs_score(b) and not t.accept(b, 1e30) for b in range(4))
    d = DraftOnly()
    assert all(not d.forced(b) and not d.needs_score(b) and d.accept(b, None) for b in range(4))
    d0 = DraftOnly(force_reject_first=True)
    assert d0.forced(0) and not d0.accept(0, None) and not d0.forced(1) and d0.accept(1, None)
    for rate, want in ((1.0, True), (0.0, False)):
        r = RandomPolicy(rate, seed=3)
        assert r.forced(0) and not r.accept(0, None)
        assert all(r.accept(b, None) is want and not r.needs_score(b) for b in range(1, 20))
    half = RandomPolicy(0.5, seed=3)
    draws = [half.accept(b, None) for b in range(1, 41)]
    assert draws == [RandomPolicy(0.5, seed=3).accept(b, None) for b in range(1, 41)]  # seeded per block
    assert 5 < sum(draws) < 35 and draws != [RandomPolicy(0.5, seed=4).accept(b, None) for b in range(1, 41)]
    p = FixedPattern((False, True, False))
    assert p.forced(0) and not p.forced(1) and not p.forced(2)  # a rejected later block is still drafted
    assert [p.accept(b, None) for b in range(3)] == [False, True, False]
    assert p.needs_score(1) and p.needs_score(2) and not p.needs_score(0)
    assert not FixedPattern((False, True), score_drafts=False).needs_score(1)
    a = FixedPattern((True, False))
    assert not a.forced(0) and a.accept(0, None)


# ---------------------------------------------------------------------------------------------------------
# The rule through the engine (stand-in scorer, tiny random DiTs and VAE)
# ---------------------------------------------------------------------------------------------------------

# not slow although over a second: the routing rule through the engine stays in the quick loop
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_engine_keeps_a_draft_whose_min_score_equals_tau(models, recipe):
    tau = -0.5
    s = _engine(models, StandInScorer(flat(0.25, low=tau)), recipe=recipe).generate(_spec(), ThresholdPolicy(tau=tau))
    assert [r.decision for r in s.blocks] == ["forced"] + ["accepted"] * (BLOCKS - 1)
    assert [r.producer for r in s.blocks] == ["target"] + ["drafter"] * (BLOCKS - 1)
    assert all(r.score == tau for r in s.blocks[1:])
    # one float32 step below tau (the scorer's dtype): rejected
    below = torch.nextafter(torch.tensor(tau), torch.tensor(-math.inf)).item()
    s2 = _engine(models, StandInScorer(flat(0.25, low=below))).generate(_spec(), ThresholdPolicy(tau=tau))
    assert [r.decision for r in s2.blocks] == ["forced"] + ["rejected"] * (BLOCKS - 1)


# not slow although over a second: the min-over-frames rule through the engine stays in the quick loop
def test_engine_rejects_a_block_with_one_bad_frame(models):
    scorer = StandInScorer(one_bad_frame)
    s = _engine(models, scorer).generate(_spec(), ThresholdPolicy(tau=TAU_BETWEEN))
    assert [r.decision for r in s.blocks] == ["forced"] + ["rejected"] * (BLOCKS - 1)
    assert all(r.score == BAD and min(r.frame_scores) == BAD and len(r.frame_scores) == 12 for r in s.blocks[1:])
    assert all(r.producer == "target" for r in s.blocks)
    # the same drafts judged by their mean are kept: only the aggregation differs
    m = _engine(models, StandInScorer(one_bad_frame)).generate(_spec(), ThresholdPolicy(tau=TAU_BETWEEN, aggregation="mean"))
    assert [r.decision for r in m.blocks] == ["forced"] + ["accepted"] * (BLOCKS - 1)
    assert all(r.score == pytest.approx(sum(one_bad_frame(12)) / 12) for r in m.blocks[1:])


# not slow although over a second: the forced block 0 through the engine stays in the quick loop
def test_block0_is_forced_to_the_target_without_drafting(models):
    scorer = StandInScorer(flat(GOOD))
    s = _engine(models, scorer).generate(_spec(), ThresholdPolicy(tau=-1e9))
    b0 = s.blocks[0]
    assert (b0.decision, b0.producer, b0.score) == ("forced", "target", None)
    assert b0.work["drafter_forwards"] == 0 and b0.work["scored_frames"] == 0
    assert scorer.calls == [12] * (BLOCKS - 1)  # block 0 was never scored


def test_a_forced_block_is_never_accepted_even_if_the_policy_would(models):
    """The engine, not only the policy, keeps forced blocks from the drafter."""

    @dataclass(frozen=True)
    class ForcedButAccepting:
        aggregation: str = "min"

        def forced(self, block):
            return block == 0

        def needs_score(self, block):
            return False

        def accept(self, block, score):
            return True

    s = _engine(models, StandInScorer(flat(GOOD))).generate(_spec(), ForcedButAccepting())
    assert [r.producer for r in s.blocks] == ["target"] + ["drafter"] * (BLOCKS - 1)
    assert s.blocks[0].decision == "forced"


@pytest.mark.slow
def test_score_blind_policies_never_call_the_scorer(models):
    for pol in (ThresholdPolicy(tau=-math.inf), DraftOnly(force_reject_first=True), RandomPolicy(0.5, seed=1),
                FixedPattern((False, True, False), score_drafts=False), TargetOnly()):
        scorer = StandInScorer(flat(GOOD))
        s = _engine(models, scorer).generate(_spec(), pol)
        assert scorer.calls == [] and all(r.work["scored_frames"] == 0 and r.score is None for r in s.blocks), pol


@pytest.mark.slow
def test_tau_plus_inf_drafts_nothing(models):
    scorer = StandInScorer(flat(GOOD))
    s = _engine(models, scorer).generate(_spec(), ThresholdPolicy(tau=math.inf))
    assert [r.decision for r in s.blocks] == ["forced"] * BLOCKS
    assert all(r.work["drafter_forwards"] == 0 for r in s.blocks) and scorer.calls == []


@pytest.mark.slow
def test_tau_minus_inf_keeps_every_draft_after_block0(models):
    s = _engine(models, StandInScorer(flat(BAD))).generate(_spec(), ThresholdPolicy(tau=-math.inf))
    assert [r.decision for r in s.blocks] == ["forced"] + ["accepted"] * (BLOCKS - 1)


@pytest.mark.slow
def test_lazy_false_drafts_and_scores_forced_blocks_but_decides_the_same(models):
    """The reference's work (lazy=False) drafts and scores block 0 and every target-only block; decisions and
    bits are those of the lazy engine."""
    pol = ThresholdPolicy(tau=TAU_BETWEEN)
    lazy_scorer, ref_scorer = StandInScorer(one_bad_frame), StandInScorer(one_bad_frame)
    lazy = _engine(models, lazy_scorer).generate(_spec(), pol)
    ref = _engine(models, ref_scorer, lazy=False).generate(_spec(), pol)
    assert [r.decision for r in ref.blocks] == [r.decision for r in lazy.blocks]
    assert torch.equal(ref.committed_latents(), lazy.committed_latents())
    assert ref.blocks[0].work["drafter_forwards"] > 0 and ref.blocks[0].work["scored_frames"] > 0
    assert lazy.blocks[0].work["drafter_forwards"] == 0
    assert len(ref_scorer.calls) == BLOCKS and len(lazy_scorer.calls) == BLOCKS - 1
    t = _engine(models, StandInScorer(flat(GOOD)), lazy=False).generate(_spec(), TargetOnly())
    assert all(r.decision == "forced" and r.producer == "target" and r.work["drafter_forwards"] > 0 for r in t.blocks)


@pytest.mark.slow
def test_lazy_engine_rebuilds_the_target_context_only_when_the_target_generates(models):
    """Krea: the reference rebuilds the target's KV every block; the lazy engine only for blocks it generates."""
    pat = FixedPattern((False, True, True))
    lazy = _engine(models, StandInScorer(flat(GOOD))).generate(_spec(), pat)
    ref = _engine(models, StandInScorer(flat(GOOD)), lazy=False).generate(_spec(), pat)
    assert [r.work.get("target_forwards", 0) for r in lazy.blocks[1:]] == [0, 0]
    assert all(r.work.get("target_context_forwards", 0) == 1 for r in ref.blocks[1:])


@pytest.mark.slow
def test_an_accepted_draft_is_decoded_once(models):
    s = _engine(models, StandInScorer(flat(GOOD))).generate(_spec(), ThresholdPolicy(tau=-1e9))
    assert all(r.decision == "accepted" and r.work["vae_decode_frames"] == 3 for r in s.blocks[1:])


@pytest.mark.slow
def test_each_role_runs_its_own_recipe(models):
    """EngineConfig.drafter_recipe / target_recipe: each model builds its context with its own recipe."""
    sf, krea = SelfForcingRecipe(), KreaRecipe()

    def run(policy, **cfg):
        return _engine(models, StandInScorer(flat(GOOD)), **cfg).generate(_spec(), policy).committed_latents()

    mixed = dict(drafter_recipe=sf, target_recipe=krea)
    assert torch.equal(run(TargetOnly(), **mixed), run(TargetOnly(), recipe=krea))
    drafted = run(DraftOnly(), **mixed)
    assert not torch.equal(drafted, run(DraftOnly(), recipe=krea))
    assert torch.equal(drafted, run(DraftOnly(), recipe=sf, target_recipe=krea))
    swapped = run(DraftOnly(), drafter_recipe=krea, target_recipe=sf)
    assert not torch.equal(drafted, swapped)
