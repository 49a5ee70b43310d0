"""Blocks of any size and a shorter last block, as ComfyUI core's AR loop runs them (7 latent frames in blocks of 3 are
3 + 3 + 1; frame-wise Causal Forcing runs blocks of 1): the spec, the noise, every recipe, the memo keys, the per-block
decode and score, the report, and the demo's --frames.
"""
from __future__ import annotations

import json

import pytest
import torch

from sdvg_core import (Engine, EngineConfig, GenerationSpec, KreaRecipe, LongLiveRecipe, PixelInput, PromptConditioning,
                       SelfForcingRecipe, TargetOnly, ThresholdPolicy, build_report, tiny_models)
from sdvg_core.engine.noise import ComfyARNoise
from sdvg_core.engine.state import blocks_for, latent_frames_for
from sdvg_core.io.text import demo_embeddings

W, H, SEED = 48, 32, 7
PROMPT = "a corgi runs through a meadow"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def prompt() -> PromptConditioning:
    return PromptConditioning.make(PROMPT, demo_embeddings(PROMPT, 32))


def spec(latent_frames: int, F: int = 3, pixels=None) -> GenerationSpec:
    return GenerationSpec(prompt(), W, H, blocks_for(latent_frames, F), SEED, F, pixels, latent_frames=latent_frames)


def video_noise(frames: int) -> torch.Tensor:
    """One whole-video noise [1, C, T, h, w] (core's Noise node), sliced by every run below."""
    return torch.randn(1, 16, frames, H // 8, W // 8, generator=torch.Generator().manual_seed(SEED))


def run(models, s: GenerationSpec, recipe=SelfForcingRecipe(), policy=TargetOnly(), noise: torch.Tensor | None = None,
        engine: Engine | None = None):
    config = EngineConfig(recipe=recipe)
    engine = engine or Engine(models.target, models.vae, models.drafter, models.scorer, config,
                              noise_fn=ComfyARNoise(num_renoise=config.num_renoise,
                                                    video=noise if noise is not None else video_noise(9)))
    return engine, engine.generate(s, policy)


# ------------------------------------------------------------------------------------------------ the spec
def test_a_spec_holds_a_shorter_last_block_and_names_it():
    s = spec(7)
    assert (s.num_blocks, s.num_latent_frames) == (3, 7)
    assert [s.block_frames(b) for b in range(3)] == [3, 3, 1] and [s.block_start(b) for b in range(3)] == [0, 3, 6]
    assert [s.frames_before(b) for b in range(4)] == [0, 3, 6, 7]
    whole = GenerationSpec(prompt(), W, H, 3, SEED)
    assert spec(9).latent_frames is None and spec(9).identity() == whole.identity()  # whole blocks: one spelling
    assert s.identity() != whole.identity()  # another video: the memo shares nothing with the whole run's last block
    assert [spec(5, F).block_frames(spec(5, F).num_blocks - 1) for F in (1, 2, 3, 4)] == [1, 1, 2, 1]
    with pytest.raises(ValueError, match="do not make 2 block.*make 3"):
        GenerationSpec(prompt(), W, H, 2, SEED, latent_frames=7)
    with pytest.raises(ValueError, match="do not make 3 block"):
        GenerationSpec(prompt(), W, H, 3, SEED, latent_frames=6)


def test_frames_become_latent_frames_and_blocks_as_comfyui_counts_them():
    assert [latent_frames_for(n) for n in (1, 5, 25, 81, 84, 85)] == [1, 2, 7, 21, 21, 22]
    assert [blocks_for(21, F) for F in (1, 2, 3, 4)] == [21, 11, 7, 6]
    s = GenerationSpec.for_frames(prompt(), W, H, 25, SEED)
    assert (s.num_blocks, s.num_latent_frames, s.block_frames(2)) == (3, 7, 1)
    assert GenerationSpec.for_frames(prompt(), W, H, 81, SEED).latent_frames is None  # 7 whole blocks
    with pytest.raises(ValueError, match="at least 1 frame"):
        latent_frames_for(0)


def test_video_to_video_is_refused_a_shorter_last_block():
    frames = torch.rand(40, H, W, 3)
    with pytest.raises(ValueError, match="whole block at a time.*block of 1"):
        spec(7, pixels=PixelInput.video_to_video(frames))
    assert spec(6, pixels=PixelInput.video_to_video(frames)).num_blocks == 2


# ------------------------------------------------------------------------------------------------ the noise
def test_the_noise_of_a_short_block_is_its_own_frames_and_shape():
    s = spec(7)
    noise = ComfyARNoise(video=video_noise(7))
    last = noise(s, 2)
    assert last.initial.shape == (1, 1, 16, H // 8, W // 8) and last.renoise.shape == (3, 1, 1, 16, H // 8, W // 8)
    assert torch.equal(last.initial, video_noise(7)[:, :, 6:7].permute(0, 2, 1, 3, 4))
    from sdvg_core.engine.noise import NoiseSource

    assert NoiseSource(None, 16, 3)(s, 2).initial.shape[1] == 1  # the seeded default too


# ------------------------------------------------------------------------------------------------ the engine
@pytest.mark.parametrize("recipe", [SelfForcingRecipe(), LongLiveRecipe(window=6, sink=3), KreaRecipe()],
                         ids=["self_forcing", "longlive", "krea"])
def test_a_shorter_last_block_runs_and_the_blocks_before_it_are_the_whole_runs(models, recipe):
    """Blocks before the short one are the whole run's (causal: nothing after them is seen; to float rounding, the
    KV buffer being sized for 7 frames, not 9); the last block holds what is left; every recipe's context reads only
    whole committed blocks."""
    _, whole = run(models, spec(9), recipe)
    _, short = run(models, spec(7), recipe)
    assert [b.latents.shape[1] for b in short.blocks] == [3, 3, 1]
    for b in range(2):
        assert torch.allclose(short.blocks[b].latents, whole.blocks[b].latents, atol=1e-5, rtol=0), b
    assert not torch.equal(short.blocks[2].latents, whole.blocks[2].latents[:, :1])  # a 1-frame block attends alone
    assert short.committed_latents().shape[1] == 7


@pytest.mark.parametrize("recipe,held", [(SelfForcingRecipe(), 7), (LongLiveRecipe(window=6, sink=3), 6)],
                         ids=["self_forcing", "longlive"])
def test_the_committed_view_past_a_short_last_block_holds_the_video_and_nothing_more(models, recipe, held):
    """Asked past the last block (the whole video's committed view: a caller that reads it), an append-cache recipe
    commits the short last block's own frame and says the video ends at 7 latent frames, not at 3 whole blocks' 9;
    every commit of the run extended its cache (nothing rebuilt from the start)."""
    from sdvg_core.derived.tally import Tally

    engine, state = run(models, spec(7), recipe)
    tally = Tally()
    kv, end = recipe.context(engine.services, "target", engine.target, state, state.spec.num_blocks, tally)
    assert (kv.frames, end) == (held, 7)  # LongLive keeps its 6-frame window of the 7
    assert tally.work["target_context_forwards"] == 1  # the last block's one commit, onto the cached view


@pytest.mark.parametrize("F,frames", [(1, 3), (2, 5), (4, 7)])
def test_any_block_size_runs_and_a_rerun_recomputes_nothing(models, F, frames):
    s = spec(frames, F)
    engine, first = run(models, s, noise=video_noise(frames))
    assert [b.latents.shape[1] for b in first.blocks] == [s.block_frames(b) for b in range(s.num_blocks)]
    again = engine.generate(s, TargetOnly())
    report = build_report(again, "t", engine.recipe, engine.recipe.plan.num_steps)
    assert report.recomputed_target_forwards == 0 and torch.equal(again.committed_latents(), first.committed_latents())
    assert report.frames_per_block == F and [b.latent_frames for b in report.blocks] == \
        [s.block_frames(b) for b in range(s.num_blocks)]


def test_routing_decodes_and_scores_the_frames_a_short_block_decodes_to(models):
    """Block b's draft decodes to 1 + 4 (n - 1) pixel frames in block 0 and 4 n after: the short last block's one
    latent frame gives 4, all of them scored; the committed decode counts the block's own latent frames."""
    s = spec(7)
    engine, state = run(models, s, policy=ThresholdPolicy(tau=-5.0))
    assert [b.producer for b in state.blocks] == ["target", "drafter", "drafter"]
    assert [len(b.frame_scores) for b in state.blocks] == [0, 12, 4]
    assert sum(b.work.get("vae_decode_frames", 0) for b in state.blocks) == 7  # each latent frame decoded once
    assert engine.frames(state).shape[0] == 1 + 4 * 6  # the whole video: 25 frames
    data = json.loads(build_report(state, "sdvg", engine.recipe, engine.recipe.plan.num_steps).to_json())
    assert [b["latent_frames"] for b in data["blocks"]] == [3, 3, 1] and data["frames_per_block"] == 3


def test_frame_wise_blocks_with_a_start_image(models):
    """Blocks of 1 latent frame after a start image (core's I2V template: frame-wise Causal Forcing): one block per
    latent frame, the drafter's blocks routed per frame."""
    image = torch.rand(1, H, W, 3, generator=torch.Generator().manual_seed(3))
    s = spec(4, F=1, pixels=PixelInput.start_image(image))
    _, state = run(models, s, policy=ThresholdPolicy(tau=-5.0), noise=video_noise(5))
    assert [b.latents.shape[1] for b in state.blocks] == [1, 1, 1, 1]
    assert [b.producer for b in state.blocks] == ["target", "drafter", "drafter", "drafter"]
    assert [len(b.frame_scores) for b in state.blocks] == [0, 4, 4, 4]
