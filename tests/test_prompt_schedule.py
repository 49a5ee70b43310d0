"""A per-block prompt schedule: each block generated, committed and routed under its own prompt; a re-queue after
editing one prompt recomputes only from the first block whose conditioning changed."""
from __future__ import annotations

import pytest
import torch

from sdvg_core import (build_report, Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, Memo,
                       PromptConditioning, PromptSchedule, render_report_plot, ThresholdPolicy, tiny_models)
from sdvg_core.io.text import demo_embeddings

W, H, BLOCKS = 48, 32, 6
TEXTS = ("a red fox runs through snow", "the fox stops and looks at the camera", "the fox jumps into a river")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _p(text: str) -> PromptConditioning:
    return PromptConditioning.make(text, demo_embeddings(text, 32))


def _spec(schedule=((0, TEXTS[0]), (2, TEXTS[1]), (4, TEXTS[2])), blocks: int = BLOCKS) -> GenerationSpec:
    return GenerationSpec(PromptSchedule.of((b, _p(t)) for b, t in schedule), W, H, blocks, 42)


class RecordingScorer:
    """The tiny ImageReward scorer, recording which prompt each scoring call was for."""

    def __init__(self, inner):
        self.inner, self.key, self.prompts = inner, inner.key, []

    def score_frames(self, frames, prompt):
        self.prompts.append(prompt)
        return self.inner.score_frames(frames, prompt)


def _engine(models, memo=None, scorer=None, **cfg):
    return Engine(models.target, models.vae, models.drafter, scorer or models.scorer, EngineConfig(**cfg),
                  memo=memo or Memo(1 << 40))


@pytest.mark.slow
def test_single_prompt_is_the_one_entry_schedule(models):
    """A spec with no switch is the schedule of one entry: same bits as before schedules existed."""
    p = _p(TEXTS[0])
    plain = GenerationSpec(p, W, H, 3, 42)
    sched = GenerationSpec(PromptSchedule.of([(0, p)]), W, H, 3, 42)
    assert plain == sched and plain.schedule == PromptSchedule.one(p) and [tuple(e) for e in plain.schedule] == [(0, p)]
    assert plain.prompt_at(2) is p and plain.prompt is p
    a = _engine(models).generate(plain, ThresholdPolicy(tau=-0.8))
    b = _engine(models).generate(sched, ThresholdPolicy(tau=-0.8))
    assert torch.equal(a.committed_latents(), b.committed_latents())


@pytest.mark.slow
def test_each_block_is_generated_and_routed_under_its_own_prompt(models):
    spec = _spec()
    assert [spec.segment_of(b) for b in range(BLOCKS)] == [0, 0, 1, 1, 2, 2]
    assert [spec.prompt_at(b).text for b in (0, 1, 2, 3, 4, 5)] == [TEXTS[0]] * 2 + [TEXTS[1]] * 2 + [TEXTS[2]] * 2
    scorer = RecordingScorer(models.scorer)
    e = _engine(models, scorer=scorer)
    state = e.generate(spec, FixedPattern((False,) + (True,) * (BLOCKS - 1)))  # every draft scored
    assert scorer.prompts == [spec.prompt_at(b).text for b in range(1, BLOCKS)]  # block b against its prompt
    # the switch changes the video: same noise, another prompt from block 2 on
    one = _engine(models).generate(_spec(((0, TEXTS[0]),)), FixedPattern((False,) + (True,) * (BLOCKS - 1)))
    assert torch.equal(state.blocks[1].latents, one.blocks[1].latents)
    assert not torch.equal(state.blocks[2].latents, one.blocks[2].latents)
    rep = build_report(state, "p", e.recipe, e.recipe.plan.num_steps)
    assert [b.prompt for b in rep.blocks] == [0, 0, 1, 1, 2, 2]
    assert [p["first_block"] for p in rep.prompts] == [0, 2, 4] and rep.prompts[1]["text"] == TEXTS[1]
    assert f"prompt 1 from block 2: {TEXTS[1]}" in rep.table()
    assert render_report_plot(rep, tau=-0.8).size == (640, 360)


@pytest.mark.slow
def test_text_kv_is_encoded_once_per_prompt_and_model(models):
    """Held for the whole run (one slot entry per prompt): a 0-byte memo encodes each prompt once per model."""
    calls = []
    for dit in (models.target, models.drafter):
        dit.encode_text = (lambda f: lambda *a, **k: (calls.append(1), f(*a, **k))[1])(dit.encode_text)
    try:
        _engine(models, memo=Memo(0)).generate(_spec(), FixedPattern((False, True, False, True, False, True)))
    finally:
        for dit in (models.target, models.drafter):
            del dit.encode_text
    assert len(calls) == 2 * 3


def _work(state):
    return [r.work["drafter_forwards"] + r.work["target_forwards"] for r in state.blocks]


@pytest.mark.slow
@pytest.mark.parametrize("recipe_name", ["krea", "longlive", "self_forcing"])
@pytest.mark.parametrize("edit", ["text of prompt 1", "first block of prompt 1 later", "first block of prompt 1 earlier"])
def test_requeue_after_editing_a_prompt_recomputes_from_its_first_block(models, edit, recipe_name):
    """Editing the second prompt's text, or moving its first block later or earlier, recomputes nothing before the
    first block whose conditioning changed (shown by the forwards, as for tau), and equals a fresh run."""
    from sdvg_core import recipe_by_name

    policy = FixedPattern((False, True, False, True, True, False))
    memo = Memo(1 << 40)
    recipe = recipe_by_name(recipe_name)
    e = _engine(models, memo=memo, recipe=recipe)
    first = e.generate(_spec(), policy)
    if edit == "text of prompt 1":
        schedule, changed = ((0, TEXTS[0]), (2, "the fox sits down in the snow"), (4, TEXTS[2])), 2
    elif edit == "first block of prompt 1 later":
        schedule, changed = ((0, TEXTS[0]), (3, TEXTS[1]), (4, TEXTS[2])), 2  # block 2 goes back to prompt 0
    else:
        schedule, changed = ((0, TEXTS[0]), (1, TEXTS[1]), (4, TEXTS[2])), 1  # block 1 now under prompt 1
    again = e.generate(_spec(schedule), policy)
    work = _work(again)
    assert work[:changed] == [0] * changed and all(w > 0 for w in work[changed:]), work
    assert all(torch.equal(a.latents, b.latents) for a, b in zip(first.blocks[:changed], again.blocks[:changed]))
    fresh = _engine(models, recipe=recipe).generate(_spec(schedule), policy)
    assert torch.equal(again.committed_latents(), fresh.committed_latents())


def test_bad_schedules_are_refused_before_any_work():
    p0, p1 = _p(TEXTS[0]), _p(TEXTS[1])
    with pytest.raises(ValueError, match="first blocks must increase"):
        GenerationSpec(PromptSchedule.of([(0, p0), (3, p1), (3, p0)]), W, H, 6, 0)
    with pytest.raises(ValueError, match="first blocks must increase"):
        GenerationSpec(PromptSchedule.of([(0, p0), (4, p1), (2, p0)]), W, H, 6, 0)
    with pytest.raises(ValueError, match="past the end"):
        GenerationSpec(PromptSchedule.of([(0, p0), (6, p1)]), W, H, 6, 0)
    with pytest.raises(ValueError, match="must start at block 0"):
        GenerationSpec(PromptSchedule.of([(1, p0)]), W, H, 6, 0)
    with pytest.raises(ValueError, match="empty"):
        GenerationSpec(PromptSchedule.of([]), W, H, 6, 0)
    with pytest.raises(ValueError, match="the prompt is empty"):
        GenerationSpec(PromptSchedule.of([(0, p0), (2, PromptConditioning.make("  ", demo_embeddings("x", 32)))]), W, H, 6, 0)
    with pytest.raises(ValueError, match="16 wide, block 0's are 32"):
        GenerationSpec(PromptSchedule.of([(0, p0), (2, PromptConditioning.make("y", demo_embeddings("y", 16)))]), W, H, 6, 0)


def test_a_schedule_wider_than_the_model_is_refused_at_start(models):
    wide = [(0, PromptConditioning.make("a", demo_embeddings("a", 64))),
            (1, PromptConditioning.make("b", demo_embeddings("b", 64)))]
    with pytest.raises(ValueError, match="width 64 but the target expects 32"):
        _engine(models).start(GenerationSpec(PromptSchedule.of(wide), W, H, 3, 0))


@pytest.mark.slow
def test_krea_rebuilds_each_block_under_its_own_prompt(models):
    """Krea's per-block rebuild (drafter's, then the target's after a rejection) runs under the block's own prompt."""
    seen = []
    e = _engine(models, recipe=KreaRecipe())
    e.services.context_forward = (lambda f: lambda *a, **k: (seen.append(
        a[4].spec.prompt_at(k.get("text_block") if k.get("text_block") is not None else a[4].next_block).text),
        f(*a, **k))[1])(e.services.context_forward)
    e.generate(_spec(), FixedPattern((False,) * BLOCKS))
    assert seen == [_spec().prompt_at(b).text for b in range(1, BLOCKS) for _role in ("drafter", "target")]


@pytest.mark.slow
@pytest.mark.parametrize("recipe_name", ["krea", "self_forcing", "longlive"])
def test_target_only_baseline_counts_each_recipes_switch_work(models, recipe_name):
    """The counted target-only baseline equals a target-only run's real forwards, switches included (a recache per
    switch for append caches, none for Krea's per-block rebuild)."""
    from sdvg_core import TargetOnly, recipe_by_name

    e = _engine(models, recipe=recipe_by_name(recipe_name))
    state = e.generate(_spec(), TargetOnly())
    rep = build_report(state, "target-only", e.recipe, e.recipe.plan.num_steps, cost_ratio=1.0)
    assert rep.target_only_cost == rep.target_forwards == sum(r.cost["target_forwards"] for r in state.blocks)


@pytest.mark.slow
@pytest.mark.parametrize("recipe_name", ["longlive", "self_forcing"])
def test_each_role_recaches_lazily_when_it_next_generates(models, recipe_name):
    """At a switch each model recaches only when it next generates a block, and the recache is counted as one more
    context forward of that block (in the report's forwards too): the drafter at the switch block, the target at
    the next block it is asked to make, none in between."""
    from sdvg_core import LongLiveRecipe, SelfForcingRecipe

    recipe = LongLiveRecipe(window=6, sink=3) if recipe_name == "longlive" else SelfForcingRecipe()
    blocks, switch, target_next = 8, 3, 6
    policy = FixedPattern((False, True, True, True, True, True, False, True))  # the target makes blocks 0 and 6
    runs = {}
    for name, schedule in (("one prompt", ((0, TEXTS[0]),)), ("switch", ((0, TEXTS[0]), (switch, TEXTS[1])))):
        e = _engine(models, recipe=recipe)
        state = e.generate(_spec(schedule, blocks=blocks), policy)
        rep = build_report(state, name, e.recipe, e.recipe.plan.num_steps, cost_ratio=1.0)
        runs[name] = (state, rep)
    for role, at in (("drafter", switch), ("target", target_next)):
        key = f"{role}_context_forwards"
        extra = [s.cost[key] - o.cost[key] for s, o in zip(runs["switch"][0].blocks, runs["one prompt"][0].blocks)]
        assert extra == [1 if b == at else 0 for b in range(blocks)], (role, extra)
    (_, rep_switch), (_, rep_one) = runs["switch"], runs["one prompt"]
    assert rep_switch.drafter_forwards == rep_one.drafter_forwards + 1
    assert rep_switch.target_forwards == rep_one.target_forwards + 1
