"""A routing decoder of its own (a tiny TAEHV): drafts are scored on its frames, decoded from its memory of the
committed blocks only; the video is still the VAE's; its decodes are counted and timed apart; scores of two decoders
never share a memo entry; with the default (the VAE routes) nothing changes."""
from __future__ import annotations

import pytest
import torch

from sdvg_core import (Engine, EngineConfig, FixedPattern, GenerationSpec, Memo, PromptConditioning, SelfForcingRecipe,
                       KreaRecipe, ThresholdPolicy, tiny_models)
from sdvg_core.demo.tiny_taehv import TINY_NAME, tiny_taehv
from sdvg_core.engine.engine import to_image
from sdvg_core.engine.report import build_report
from sdvg_core.derived.keys import DraftDecodeKey, ScoreKey

W, H, BLOCKS = 48, 32, 4
MEMO = 256 << 20  # nothing evicted (an eviction would hide a wrong hit)
# block 0 forced, then accept / reject / accept: block 1's draft follows a target block, block 3's a rejected draft
MIXED = FixedPattern((False, True, False, True))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def taehv():
    return tiny_taehv(seed=5)


class RecordingScorer:
    """The tiny scorer, recording the frames of every call."""

    def __init__(self, scorer):
        self.inner, self.key, self.frames = scorer, scorer.key, []

    def score_frames(self, frames, prompt):
        self.frames.append(frames.clone())
        return self.inner.score_frames(frames, prompt)


def _spec(blocks: int = BLOCKS) -> GenerationSpec:
    emb = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1))
    return GenerationSpec(PromptConditioning.make("a red fox in the snow", emb), W, H, blocks, 42)


def _engine(m, route_vae=None, scorer=None, memo=None, **cfg) -> Engine:
    return Engine(m.target, m.vae, m.drafter, scorer or m.scorer, EngineConfig(memo_bytes=MEMO, **cfg), memo=memo,
                  route_vae=route_vae)


def _stream(decoder, latents: list[torch.Tensor]) -> tuple[torch.Tensor, object]:
    """Blocks [1, F, C, h, w] decoded one after the other from the start: (the last block's pixels, the memory after)."""
    cache, pixels = None, None
    for z in latents:
        pixels, cache = decoder.decode_stream(z.permute(0, 2, 1, 3, 4), cache)
    return pixels, cache


@pytest.mark.slow
def test_drafts_are_scored_on_the_routing_decoders_frames_after_the_committed_blocks(models, taehv):
    """Each accepted draft was scored on the tiny decoder's frames, decoded after exactly the committed blocks (block
    1 after the target's block 0; block 3 after the target's block 2, not after the rejected draft of block 2)."""
    rec = RecordingScorer(models.scorer)
    state = _engine(models, taehv, rec).generate(_spec(), MIXED)
    assert [b.decision for b in state.blocks] == ["forced", "accepted", "rejected", "accepted"]
    assert len(rec.frames) == 3  # blocks 1, 2, 3 drafted and scored
    committed = [b.latents for b in state.blocks]
    for call, b in ((0, 1), (2, 3)):  # an accepted block's draft is its committed latents
        _, memory = _stream(taehv, committed[:b])
        want, _ = taehv.decode_stream(committed[b].permute(0, 2, 1, 3, 4), memory)
        assert torch.equal(rec.frames[call], to_image(want.clamp(-1, 1)))
        by_vae, _ = _stream(models.vae, committed[:b + 1])
        assert not torch.allclose(rec.frames[call], to_image(by_vae.clamp(-1, 1)), atol=1e-3)  # not the VAE's frames
        assert list(state.blocks[b].frame_scores) == [float(s) for s in models.scorer.score_frames(
            rec.frames[call], "a red fox in the snow")]


def test_the_video_is_still_the_vaes_and_the_decisions_are_the_patterns(models, taehv):
    """Same decisions, same latents: the video is bit-identical to the default routing's (the VAE decodes it)."""
    routed, plain = _engine(models, taehv), _engine(models)
    a, b = routed.generate(_spec(), MIXED), plain.generate(_spec(), MIXED)
    assert torch.equal(a.committed_latents(), b.committed_latents())
    assert torch.equal(routed.frames(a), plain.frames(b))
    assert (routed.route_decoder, routed.output_decoder) == (f"taehv:{TINY_NAME}", "wan_vae")
    assert (plain.route_decoder, plain.output_decoder) == ("wan_vae", "wan_vae")


@pytest.mark.parametrize("memo_bytes", [MEMO, 0], ids=["memo", "no-memo"])
def test_route_decodes_are_counted_and_timed_apart_from_the_output(models, taehv, memo_bytes):
    """The tiny decoder decodes each draft once and the committed blocks it did not draft once, when the next draft
    needs them (an accepted draft's decode is its committed decode: no second one); the VAE decodes each committed
    block once for the video. Each in its own work count and phase. Without any memo budget too: what the run needs
    of each decoder (its newest memory, its draft) is held for it apart from the other's."""
    engine = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(memo_bytes=memo_bytes),
                    route_vae=taehv)
    state = engine.generate(_spec(), MIXED)
    F = state.spec.frames_per_block
    route = [b.account.work["route_decode_frames"] for b in state.blocks]
    # block 1: target block 0, then the draft; block 2: the draft only (after the accepted block 1, whose draft decode
    # is the memory); block 3: the target's block 2, then the draft (the rejected draft left nothing)
    assert route == [0, 2 * F, F, 2 * F]
    assert [b.account.work["vae_decode_frames"] for b in state.blocks] == [F] * BLOCKS
    assert all(b.account.seconds["route_decode"] > 0 for b in state.blocks[1:])
    # a draft's decode alone (the step-by-step operation): its time is the routing decoder's phase, not the VAE's
    drafted = engine.draft(engine.route(engine.start(_spec()), MIXED))
    decoded = engine.decode_draft(drafted).pending.account
    assert decoded.seconds["decode"] == 0.0 and decoded.seconds["route_decode"] > 0
    report = build_report(state, MIXED, engine.recipe, engine.recipe.plan.num_steps,
                          route_decoder=engine.route_decoder, output_decoder=engine.output_decoder)
    assert (report.route_decoder, report.output_decoder) == (f"taehv:{TINY_NAME}", "wan_vae")
    assert report.route_decode_frames == sum(route) and report.vae_decode_frames == BLOCKS * F
    assert report.seconds["route_decode"] > 0
    assert "routing decoder: taehv:tiny-taehv" in report.table()


def test_the_default_routing_is_the_vae_and_counts_nothing_apart(models):
    """No routing decoder, or the VAE itself as one: the same engine as ever (draft decodes in the VAE's count)."""
    spec, F = _spec(), 3
    a = _engine(models).generate(spec, MIXED)
    e = _engine(models, route_vae=models.vae)
    b = e.generate(spec, MIXED)
    assert e.route_pixels is e.pixels and e.route_decoder == "wan_vae"
    assert [r.frame_scores for r in a.blocks] == [r.frame_scores for r in b.blocks]
    assert [dict(r.account.work) for r in a.blocks] == [dict(r.account.work) for r in b.blocks]
    assert sum(r.account.work["route_decode_frames"] for r in a.blocks) == 0
    # the drafts of blocks 1-3 and block 2's commit: 3 decodes of the drafts, block 2's decode at its commit, block 0's
    assert sum(r.account.work["vae_decode_frames"] for r in a.blocks) == 5 * F
    report = build_report(a, MIXED, e.recipe, e.recipe.plan.num_steps)
    assert report.route_decoder == "wan_vae" and report.route_decode_frames == 0
    assert "routing decoder" not in report.table()


@pytest.mark.slow
def test_draft_decodes_and_scores_are_keyed_by_the_routing_decoder(models, taehv):
    """On one memo: the tiny decoder's run takes the drafts the VAE's run made, but none of its decodes or scores
    (scores of two decoders are never mixed); a second tiny-decoder run at another tau takes its scores."""
    memo = Memo(MEMO)
    policy = ThresholdPolicy(tau=-1e9)  # every draft scored and kept
    plain = _engine(models, memo=memo).generate(_spec(), policy)
    routed_engine = _engine(models, taehv, memo=memo)
    routed = routed_engine.generate(_spec(), policy)
    for b in routed.blocks[1:]:
        assert "drafter" in b.account.reused  # the same draft latents (they do not depend on the decoder)
        assert "score" not in b.account.reused and "draft_decode" not in b.account.reused
    assert [b.frame_scores for b in routed.blocks[1:]] != [b.frame_scores for b in plain.blocks[1:]]
    fresh = _engine(models, taehv).generate(_spec(), policy)
    assert [b.frame_scores for b in routed.blocks] == [b.frame_scores for b in fresh.blocks]
    again = _engine(models, taehv, memo=memo).generate(_spec(), ThresholdPolicy(tau=-1e8))
    assert all("score" in b.account.reused for b in again.blocks[1:])
    assert sum(b.account.work["route_decode_frames"] for b in again.blocks) == 0
    key = routed_engine.keys.score(routed_engine.start(_spec()).commit(routed.blocks[0]))
    assert isinstance(key, ScoreKey) and isinstance(key.draft, DraftDecodeKey) and key.draft.vae == taehv.key


@pytest.mark.slow
def test_a_branch_from_an_earlier_state_decodes_from_the_branchs_memory(models, taehv):
    """The tiny decoder's memory is keyed by lineage like every cache: routing block 2 again from the state after
    block 1 (now accepting it) gives block 3 the draft decode a fresh run with those decisions gives."""
    engine = _engine(models, taehv)
    spec = _spec()
    first = engine.generate(spec, MIXED)
    branch = engine.start(spec)
    for record in first.blocks[:2]:
        branch = branch.commit(record)
    other = FixedPattern((False, True, True, True))
    while not branch.done:
        branch = engine.route(branch, other)
    fresh = _engine(models, taehv).generate(spec, other)
    assert [b.decision for b in branch.blocks] == [b.decision for b in fresh.blocks]
    assert [b.frame_scores for b in branch.blocks] == [b.frame_scores for b in fresh.blocks]
    assert torch.equal(engine.frames(branch), _engine(models).frames(fresh))


def test_a_fast_preview_decodes_the_video_with_the_routing_decoder(models, taehv):
    """output_decoder "route": the video (and each block's preview) is the tiny decoder's stream of the committed
    latents; the VAE decodes nothing where no recipe reads pixels (Self-Forcing)."""
    engine = _engine(models, taehv, recipe=SelfForcingRecipe(), output_decoder="route")
    previews = []
    engine.callbacks.progress = lambda ev: previews.append(ev.preview) if ev.kind == "block" else None
    state = engine.generate(_spec(), MIXED)
    z = state.committed_latents()  # [1, T, C, h, w]
    want = to_image(taehv.decode(z.permute(0, 2, 1, 3, 4)))
    assert torch.equal(engine.frames(state), want)
    assert sum(b.account.work["vae_decode_frames"] for b in state.blocks) == 0
    assert engine.output_decoder == f"taehv:{TINY_NAME}"
    first = taehv.config.pixel_frames(state.spec.frames_per_block)  # block 0's frames (the video's first)
    assert torch.equal(previews[0], want[first - 1]) and torch.equal(previews[-1], want[-1])


@pytest.mark.slow
def test_a_fast_preview_with_krea_still_takes_the_anchor_from_the_vae(models, taehv):
    """Krea's anchor is a VAE-decoded frame re-encoded: with the tiny decoder as the output the latents are the
    default run's (the recipe's pixels are the VAE's)."""
    preview = _engine(models, taehv, recipe=KreaRecipe(), output_decoder="route")
    plain = _engine(models, recipe=KreaRecipe())
    a, b = preview.generate(_spec(), MIXED), plain.generate(_spec(), MIXED)
    assert torch.equal(a.committed_latents(), b.committed_latents())
    assert sum(r.account.work["vae_decode_frames"] for r in a.blocks) > 0  # the anchors' decodes


def test_refused_routing_decoders(models, taehv):
    with pytest.raises(ValueError, match="output_decoder 'route'"):
        _engine(models, output_decoder="route")
    with pytest.raises(ValueError, match="output_decoder must be one of"):
        EngineConfig(output_decoder="tiny")
    other = tiny_taehv(seed=1)
    other.key = None
    with pytest.raises(ValueError, match="routing decoder"):
        _engine(models, other)
    with pytest.raises(ValueError, match="not a streaming decoder"):
        _engine(models, object())
