"""EngineConfig(decode_committed=False): where only latents leave a run (ComfyUI's AR sampler) a committed block is
decoded only when something reads it; the blocks, decisions and the output decoded afterwards are the same."""
from __future__ import annotations

import pytest
import torch

from sdvg_core import (Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, LongLiveRecipe, PromptConditioning,
                       SelfForcingRecipe, TargetOnly, ThresholdPolicy, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.io.text import demo_embeddings

pytestmark = pytest.mark.slow  # every test runs a generation twice, lazily and not

BLOCKS = 4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec() -> GenerationSpec:
    return GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 48, 32, BLOCKS, 7)


class CountingVAE:
    """The tiny VAE with its decodes counted (latent frames decoded), everything else passed through."""

    def __init__(self, vae):
        self._vae, self.frames = vae, 0

    def decode_stream(self, z, cache, **kw):
        self.frames += z.shape[2]
        return self._vae.decode_stream(z, cache, **kw)

    def __getattr__(self, name):
        return getattr(self._vae, name)


def _run(m, recipe, policy, decode_committed: bool):
    vae = CountingVAE(m.vae)
    engine = Engine(m.target, vae, m.drafter, m.scorer,
                    EngineConfig(recipe=recipe, memo_bytes=0, decode_committed=decode_committed))
    state = engine.generate(_spec(), policy)
    during = vae.frames
    return state, during, engine.frames(state), vae



# block 0 forced, then accept / reject / accept: every draft decoded and scored, as SDVG does
MIXED = FixedPattern((False, True, False, True))


@pytest.mark.parametrize("recipe", [SelfForcingRecipe(), LongLiveRecipe(), KreaRecipe()], ids=lambda r: r.name)
def test_lazy_commit_decodes_give_the_same_blocks_decisions_and_output(models, recipe):
    eager, eager_n, eager_frames, _ = _run(models, recipe, MIXED, True)
    lazy, lazy_n, lazy_frames, _ = _run(models, recipe, MIXED, False)
    decisions = [b.decision for b in lazy.blocks]
    assert decisions == [b.decision for b in eager.blocks] == ["forced", "accepted", "rejected", "accepted"]
    assert [b.score for b in lazy.blocks] == [b.score for b in eager.blocks]
    assert torch.equal(lazy.committed_latents(), eager.committed_latents())
    assert torch.equal(lazy_frames, eager_frames)  # decoded on demand afterwards: the same video
    assert lazy_n <= eager_n


@pytest.mark.parametrize("recipe", [SelfForcingRecipe(), LongLiveRecipe()], ids=lambda r: r.name)
def test_a_target_only_run_decodes_nothing_without_committed_decodes(models, recipe):
    eager, eager_n, _, _ = _run(models, recipe, TargetOnly(), True)
    lazy, lazy_n, _, _ = _run(models, recipe, TargetOnly(), False)
    assert eager_n == BLOCKS * eager.spec.frames_per_block  # every committed block decoded as it was committed
    assert lazy_n == 0  # nothing read a pixel: no decode
    assert sum(b.account.work.get("vae_decode_frames", 0) for b in lazy.blocks) == 0  # and the report says so
    assert torch.equal(lazy.committed_latents(), eager.committed_latents())


def test_a_draft_after_a_target_block_decodes_that_block_first(models):
    """The decoder cache a draft continues is the one after the previous committed block: a target block not decoded
    at its commit is decoded when the next draft is (the same decodes, later), the last block never."""
    recipe = SelfForcingRecipe()
    state, n, _, _ = _run(models, recipe, ThresholdPolicy(tau=1e9), False)  # every draft rejected
    F = state.spec.frames_per_block
    assert [b.decision for b in state.blocks] == ["forced"] + ["rejected"] * (BLOCKS - 1)
    # drafts of blocks 1..3 decoded, and before each the block before it: 3 drafts + blocks 0..2
    assert n == (BLOCKS - 1) * F + (BLOCKS - 1) * F
