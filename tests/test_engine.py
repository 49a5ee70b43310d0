"""SDVG engine: Krea recipe parity, baselines, reproducibility, re-run reuse, compute-only-what-is-needed."""
from __future__ import annotations

import gc
import json
import math

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core import (BlockNoise, build_report, CausalWan, DraftOnly, Engine, EngineConfig, FixedPattern,
                       GenerationSpec, KreaRecipe, LongLiveRecipe, ProgressEvent, PromptConditioning, PromptSchedule,
                       RandomPolicy, SelfForcingRecipe, TargetOnly, ThresholdPolicy, tiny_models, WanDiTConfig, WanVAE,
                       WanVAEConfig)
from sdvg_core.models.wan_config import PRESETS
from sdvg_core.engine.report import reference_forwards
from sdvg_core.io.text import demo_embeddings
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.models.wan import WanDiT, build_random

TOL = 1e-4
W, H, BLOCKS = 48, 32, 4  # the fixture geometry: latent 4x6, 6 tokens per frame


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(blocks: int = BLOCKS, seed: int = 42, prompt: str = DEMO_PROMPT, w: int = W, h: int = H) -> GenerationSpec:
    return GenerationSpec(PromptConditioning.make(prompt, demo_embeddings(prompt, 32)), w, h, blocks, seed)


def _engine(m, recipe=None, **kw) -> Engine:
    cfg = EngineConfig(recipe=recipe or KreaRecipe(), **kw)
    return Engine(m.target, m.vae, m.drafter, m.scorer, cfg)


def _latents(state) -> torch.Tensor:
    return state.committed_latents()


RECIPES = [KreaRecipe(), SelfForcingRecipe()]


# ---------------------------------------------------------------------------------------------------------
# Parity with the Krea reference loop (golden tensors, docs/design.md §6)
# ---------------------------------------------------------------------------------------------------------

def _fixture_configs(fixtures_dir, name: str) -> tuple[dict, WanDiTConfig, WanVAEConfig]:
    """The fixture's meta.json and the DiT / VAE configs it was made with (every size read from meta.json)."""
    meta = json.loads((fixtures_dir / name / "meta.json").read_text())
    dit = WanDiTConfig.from_mapping(meta["model_config"], name=f"{name}-dit")
    vmeta = meta.get("vae_config") or json.loads((fixtures_dir / "wan_vae_tiny" / "meta.json").read_text())["vae_config"]
    vae = WanVAEConfig(name="fixture-vae", dim=vmeta["dim"], z_dim=vmeta["z_dim"], dim_mult=tuple(vmeta["dim_mult"]),
                       num_res_blocks=vmeta["num_res_blocks"], attn_scales=tuple(vmeta["attn_scales"]),
                       temporal_downsample=tuple(vmeta["temperal_downsample"]))
    return meta, dit, vae


def _weights_file(fixtures_dir, name: str, meta: dict, which: str):
    """A weights file as the fixture's meta.json names it (relative to the fixture folder)."""
    w = meta.get("weights", {})
    if which in w:  # krea_recipe_tiny: {"dit": {"file": ...}, "vae": {"file": ...}}
        return (fixtures_dir / name / w[which]["file"]).resolve()
    if which == "dit" and "file" in w:  # causal_wan_tiny: its own DiT weights
        return fixtures_dir / name / w["file"]
    return fixtures_dir / "wan_vae_tiny" / "weights.safetensors"  # a fixture naming no VAE: the VAE fixture's


def _fixture_engine(fixtures_dir, tensors: str, config: EngineConfig, tracer=None):
    """The fixture DiT as target and the fixture VAE, fed the fixture's pre-drawn noise; sizes from meta.json."""
    meta, cfg, vcfg = _fixture_configs(fixtures_dir, tensors)
    w = load_file(_weights_file(fixtures_dir, tensors, meta, "dit"))
    net = WanDiT(cfg).eval()
    net.load_state_dict({k.removeprefix("model."): v for k, v in w.items()})
    vae = WanVAE.from_state_dict(load_file(_weights_file(fixtures_dir, tensors, meta, "vae")), config=vcfg)
    vae.key = "fixture-vae"
    T = load_file(fixtures_dir / tensors / "tensors.safetensors")
    F = _frames_per_block(meta)

    def noise(spec, b):  # re-noising draws as [steps-1, B, F, C, h, w]
        return BlockNoise(T["initial_noise"][:, F * b:F * (b + 1)], T["renoise_noise"][b][:, None])

    engine = Engine(CausalWan(net, cfg, key="fixture-dit"), vae, config=config, noise_fn=noise, tracer=tracer)
    return engine, T, meta


def _frames_per_block(meta: dict) -> int:
    """Latent frames per block as the fixture's meta.json records it (Krea server session or SF geometry)."""
    return meta["session"]["num_frame_per_block"] if "session" in meta else meta["geometry"]["frames_per_block"]


def _fixture_spec(T, meta, vae_cfg: WanVAEConfig) -> GenerationSpec:
    """The fixture's geometry: pixel size from the latent shape x the VAE's 8x, blocks from the noise length."""
    _, frames, _, h, w = T["initial_noise"].shape  # [1, blocks * F, C, h, w]
    F = _frames_per_block(meta)
    scale = 2 ** (len(vae_cfg.dim_mult) - 1)  # the VAE's spatial compression (8 for Wan 2.1)
    # the seed is unused: the fixture's own noise is fed through noise_fn
    return GenerationSpec(PromptConditioning.make("fixture", T["text_context"]), w * scale, h * scale, frames // F,
                          seed=0, frames_per_block=F)


def test_krea_recipe_matches_reference(fixtures_dir):
    traced: dict[str, torch.Tensor] = {}
    meta = json.loads((fixtures_dir / "krea_recipe_tiny" / "meta.json").read_text())
    recipe = KreaRecipe(context_frames=meta["window"]["context_frames"],
                        num_steps=len(meta["schedule"]["denoising_step_list"]))
    engine, T, meta = _fixture_engine(fixtures_dir, "krea_recipe_tiny", EngineConfig(recipe=recipe, decode_rule="krea"),
                                      tracer=lambda n, t: traced.__setitem__(n, t.detach().clone()))
    spec = _fixture_spec(T, meta, engine.vae.config)
    state = engine.generate(spec, TargetOnly())

    worst: dict[str, float] = {}
    matched = 0
    for name, got in traced.items():
        ref_name = name.removeprefix("target/").replace("/context", "/recompute/model_input")
        assert ref_name in T, f"traced {name} has no reference tensor"
        d = (got.float() - T[ref_name].float().reshape(got.shape)).abs().max().item()
        group = ref_name.split("/", 1)[1].split("/")[0] if "/" in ref_name else ref_name
        group = "step_calls" if group.startswith("step") else group
        worst[group] = max(worst.get(group, 0.0), d)
        matched += 1
    worst["output_latents"] = (_latents(state) - T["output_latents"]).abs().max().item()
    # every reference tensor of a model call, rebuild, anchor and cache was traced and compared
    n, layers, steps = spec.num_blocks, engine.target.cfg.num_layers, engine.recipe.plan.num_steps
    anchors = sum(1 for k in T if k.endswith("/anchor/latent"))
    assert matched == n * steps * 3 + (n - 1) + 2 * anchors + (n - 1) * layers * 2 + n * layers * 2
    print(f"\n[parity krea_recipe_tiny] {matched} tensors; " + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
    assert max(worst.values()) <= TOL, worst
    # the model calls: block 0 makes `steps`, later blocks 1 rebuild + `steps` (as the reference)
    assert [b.work["target_forwards"] for b in state.blocks] == [steps] + [steps + 1] * (n - 1)
    pixel_frames = engine.vae.config.pixel_frames(spec.num_latent_frames)
    assert engine.frames(state).shape == (pixel_frames, spec.height, spec.width, 3)


def test_self_forcing_recipe_matches_reference(fixtures_dir):
    """Target-only under the Self-Forcing recipe is the causal_wan_tiny pipeline (3 blocks, commit at t=0)."""
    engine, T, meta = _fixture_engine(fixtures_dir, "causal_wan_tiny", EngineConfig(recipe=SelfForcingRecipe()))
    spec = _fixture_spec(T, meta, engine.vae.config)
    state = engine.generate(spec, TargetOnly())
    d = (_latents(state) - T["output_latents"]).abs().max().item()
    print(f"\n[parity causal_wan_tiny via engine] output_latents {d:.2e}")
    assert d <= TOL
    steps = engine.recipe.plan.num_steps  # commits are lazy: one per block before the next, none after the last
    assert [b.work["target_forwards"] for b in state.blocks] == [steps] + [steps + 1] * (spec.num_blocks - 1)


# ---------------------------------------------------------------------------------------------------------
# Baselines and invariants (both recipes)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_tau_above_every_score_is_target_only_bit_for_bit(models, recipe):
    """SDVG's real path (draft, decode, score, reject) at a tau above every score equals the target-only run."""
    scores = [x for x in _scores_all_accepted(models, recipe) if x is not None]
    tau = max(scores) + 1.0  # finite: every draft is drafted, decoded and scored, then rejected
    ref = _engine(models, recipe).generate(_spec(), TargetOnly())
    e = _engine(models, recipe)
    s = e.generate(_spec(), ThresholdPolicy(tau=tau))
    assert [r.decision for r in s.blocks] == ["forced"] + ["rejected"] * (BLOCKS - 1)
    assert all(r.work["drafter_forwards"] > 0 and r.work["scored_frames"] > 0 for r in s.blocks[1:])
    assert torch.equal(_latents(s), _latents(ref))
    assert torch.equal(e.frames(s), _engine(models, recipe).frames(ref))
    # tau = +inf is the same decision made without drafting anything
    inf = _engine(models, recipe).generate(_spec(), ThresholdPolicy(tau=math.inf))
    assert torch.equal(_latents(inf), _latents(ref))
    assert all(r.work["drafter_forwards"] == 0 and r.work["scored_frames"] == 0 for r in inf.blocks)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_tau_minus_inf_is_drafter_with_block0_from_target(models, recipe):
    e = _engine(models, recipe)
    s = e.generate(_spec(), ThresholdPolicy(tau=-math.inf))
    assert [r.producer for r in s.blocks] == ["target"] + ["drafter"] * (BLOCKS - 1)
    assert all(r.work["scored_frames"] == 0 for r in s.blocks)  # accept-all needs no score
    ref = _engine(models, recipe).generate(_spec(), DraftOnly(force_reject_first=True))
    assert torch.equal(_latents(s), _latents(ref))
    # block 0 is the target's block 0, the rest are the drafter's continuations
    t0 = _engine(models, recipe).generate(_spec(), TargetOnly())
    assert torch.equal(s.blocks[0].latents, t0.blocks[0].latents)


@pytest.mark.slow
def test_same_seed_same_bits_and_different_seed_differs(models):
    pol = ThresholdPolicy(tau=-0.5)
    a = _engine(models).generate(_spec(seed=7), pol)
    b = _engine(models).generate(_spec(seed=7), pol)
    c = _engine(models).generate(_spec(seed=8), pol)
    assert torch.equal(_latents(a), _latents(b))
    assert [r.frame_scores for r in a.blocks] == [r.frame_scores for r in b.blocks]
    assert not torch.equal(_latents(a), _latents(c))


def _scores_all_accepted(models, recipe):
    e = _engine(models, recipe)
    s = e.generate(_spec(), ThresholdPolicy(tau=-1e9))  # finite tau: every draft scored, all accepted
    return [r.score for r in s.blocks]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_rerun_with_new_tau_reuses_prefix_and_equals_fresh_run(models, recipe):
    scores = _scores_all_accepted(models, recipe)
    # choose tau2 so the lowest-scoring block k >= 1 flips to reject and every block before it stays accepted
    later = sorted(scores[1:])
    k = scores.index(later[0])
    tau2 = (later[0] + later[1]) / 2 if later[1] > later[0] else later[0] + 1e-6
    e = _engine(models, recipe)
    first = e.generate(_spec(), ThresholdPolicy(tau=-1e9))
    second = e.generate(_spec(), ThresholdPolicy(tau=tau2))
    fresh = _engine(models, recipe).generate(_spec(), ThresholdPolicy(tau=tau2))
    assert torch.equal(_latents(second), _latents(fresh))
    assert [r.decision for r in second.blocks] == [r.decision for r in fresh.blocks]
    assert second.blocks[k].decision == "rejected" and all(r.decision == "accepted" for r in second.blocks[1:k])
    # forward counts prove the reuse: nothing is recomputed before block k, and block k reuses its draft
    for r in second.blocks[:k]:
        assert r.work["drafter_forwards"] == 0 and r.work["target_forwards"] == 0 and r.work["scored_frames"] == 0, r
    assert second.blocks[k].work["drafter_forwards"] == 0 and second.blocks[k].work["target_forwards"] > 0
    assert "drafter" in second.blocks[k].reused
    if k + 1 < BLOCKS:  # after the flip, the history is new: real work again
        assert second.blocks[k + 1].work["drafter_forwards"] > 0
    assert first.blocks[k].decision == "accepted"
    # the report still counts what the video costs in a fresh run, and says what this run recomputed
    steps = e.recipe.plan.num_steps
    rep2, rep_fresh = build_report(second, "", e.recipe, steps), build_report(fresh, "", e.recipe, steps)
    assert (rep2.drafter_forwards, rep2.target_forwards) == (rep_fresh.drafter_forwards, rep_fresh.target_forwards)
    assert [b.cost for b in second.blocks] == [b.cost for b in fresh.blocks]
    assert rep2.recomputed_drafter_forwards < rep_fresh.drafter_forwards
    assert rep2.counted_speedup == rep_fresh.counted_speedup
    # and a third run at tau1 again reuses everything
    third = e.generate(_spec(), ThresholdPolicy(tau=-1e9))
    assert torch.equal(_latents(third), _latents(first))
    assert sum(r.work["drafter_forwards"] + r.work["target_forwards"] for r in third.blocks) == 0
    assert [b.cost for b in third.blocks] == [b.cost for b in first.blocks]


@pytest.mark.slow
def test_rejected_draft_decode_leaves_no_trace(models):
    """Drafts decoded + scored + rejected (tau huge but finite) give exactly the target-only video."""
    e = _engine(models)
    s = e.generate(_spec(), ThresholdPolicy(tau=1e9))
    assert all(r.work["scored_frames"] > 0 for r in s.blocks[1:])  # the drafts really were decoded and scored
    t = _engine(models).generate(_spec(), TargetOnly())
    assert torch.equal(_latents(s), _latents(t))
    assert torch.equal(e.frames(s), _engine(models).frames(t))


@pytest.mark.slow
def test_lazy_saves_work_and_is_bit_identical_to_reference_mode(models):
    pol = ThresholdPolicy(tau=-0.5)
    lazy_e, ref_e = _engine(models), _engine(models, lazy=False)
    lazy = lazy_e.generate(_spec(), pol)
    ref = ref_e.generate(_spec(), pol)
    assert torch.equal(_latents(lazy), _latents(ref))
    assert torch.equal(lazy_e.frames(lazy), ref_e.frames(ref))
    steps = lazy_e.recipe.plan.num_steps
    rl, rr = build_report(lazy, "", lazy_e.recipe, steps), build_report(ref, "", ref_e.recipe, steps)
    rejected = [r.producer == "target" for r in ref.blocks]
    assert (rr.drafter_forwards, rr.target_forwards) == reference_forwards(KreaRecipe(), rejected, steps)
    assert rl.drafter_forwards == rr.drafter_forwards - steps  # no draft of block 0
    accepted = sum(not x for x in rejected)
    assert rl.target_forwards == rr.target_forwards - accepted  # no target rebuild on accepted blocks
    assert lazy.blocks[0].work["scored_frames"] == 0 and ref.blocks[0].work["scored_frames"] > 0


def _live_tensors() -> int:
    import warnings

    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # touching some torch module objects emits deprecation warnings
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


@pytest.mark.slow
def test_memory_does_not_grow_over_repeated_runs(models):
    e = _engine(models, memo_bytes=64 << 20)
    pol = ThresholdPolicy(tau=-0.5)
    e.generate(_spec(), pol)
    base_bytes, base_len = e.memo.bytes, len(e.memo)
    base_tensors = _live_tensors()
    for _ in range(20):
        e.generate(_spec(), pol)
    tensors = _live_tensors()
    assert (e.memo.bytes, len(e.memo)) == (base_bytes, base_len)
    assert tensors <= base_tensors + 8, (base_tensors, tensors)
    # new histories (other seeds) are bounded by the byte budget
    for seed in range(20):
        e.generate(_spec(seed=100 + seed), pol)
        assert e.memo.bytes <= e.memo.max_bytes
    assert e.memo.stats.evictions > 0


def test_force_reject_first_off_lets_block0_be_accepted(models):
    s = _engine(models).generate(_spec(), ThresholdPolicy(tau=-1e9, force_reject_first=False))
    assert s.blocks[0].producer == "drafter" and s.blocks[0].decision == "accepted"
    assert s.blocks[0].work["target_forwards"] == 0


@pytest.mark.slow
def test_operations_one_by_one_equal_generate(models):
    """The nodes' path: draft -> decode -> score -> route per block gives generate()'s output."""
    pol = ThresholdPolicy(tau=-0.5)
    e = _engine(models)
    state = e.start(_spec())
    events: list[ProgressEvent] = []
    e.callbacks.progress = events.append
    while not state.done:
        if not pol.forced(state.next_block):
            state = e.score_draft(e.decode_draft(e.draft(state)))
            assert state.pending.frames.shape[1:] == (H, W, 3) and len(state.pending.frame_scores) == state.pending.frames.shape[0]
        state = e.route(state, pol)
    ref = _engine(models).generate(_spec(), pol)
    assert torch.equal(_latents(state), _latents(ref))
    assert [r.decision for r in state.blocks] == [r.decision for r in ref.blocks]
    blocks = [ev for ev in events if ev.kind == "block"]
    assert [ev.block for ev in blocks] == list(range(BLOCKS)) and blocks[-1].preview.shape == (H, W, 3)


@pytest.mark.slow
def test_random_policy_and_patterns(models):
    s = _engine(models).generate(_spec(), RandomPolicy(0.5, seed=3))
    assert s.blocks[0].producer == "target" and all(r.work["scored_frames"] == 0 for r in s.blocks)
    again = _engine(models).generate(_spec(), RandomPolicy(0.5, seed=3))
    assert [r.decision for r in s.blocks] == [r.decision for r in again.blocks]
    p = _engine(models).generate(_spec(), FixedPattern((False, True, False, True)))
    assert [r.decision for r in p.blocks] == ["forced", "accepted", "rejected", "accepted"]
    assert p.blocks[2].work["drafter_forwards"] > 0  # a rejected block was drafted first


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_interrupt_leaves_no_partial_block_and_the_rerun_recomputes_exactly_it(models, recipe):
    """Cancel in the middle of block k's steps: nothing of block k is memoised, blocks < k are reused by the
    next run, block k is computed again in full, and the video equals an uninterrupted run bit for bit."""
    k, cancel_after_step = 2, 2
    e = _engine(models, recipe)
    steps = e.recipe.plan.num_steps

    class Cancelled(Exception):
        pass

    armed = {"on": False}

    def progress(ev: ProgressEvent) -> None:
        if ev.kind == "step" and ev.block == k and ev.step == cancel_after_step:
            armed["on"] = True

    def interrupt() -> None:
        if armed["on"]:
            raise Cancelled()

    e.callbacks.progress, e.callbacks.interrupt = progress, interrupt
    with pytest.raises(Cancelled):
        e.generate(_spec(), TargetOnly())
    assert e.memo.kinds().get("target") == k  # blocks 0..k-1 finished; no partial result of block k is kept
    assert e.memo.kinds().get("pixels") == k
    e.callbacks.progress, e.callbacks.interrupt = None, None
    again = e.generate(_spec(), TargetOnly())
    for r in again.blocks[:k]:
        assert r.work["target_forwards"] == 0 and r.work["vae_decode_frames"] == 0 and "target" in r.reused, r
    assert again.blocks[k].work["target_forwards"] >= steps and "target" not in again.blocks[k].reused
    assert again.blocks[k].work["vae_decode_frames"] == again.blocks[k].latents.shape[1]
    fresh = _engine(models, recipe).generate(_spec(), TargetOnly())
    assert torch.equal(_latents(again), _latents(fresh))
    assert [r.cost for r in again.blocks] == [r.cost for r in fresh.blocks]


def test_report_json_and_acceptance(models):
    e = _engine(models)
    s = e.generate(_spec(), FixedPattern((False, True, True, False)))
    r = build_report(s, "pattern", e.recipe, e.recipe.plan.num_steps)
    assert r.acceptance_blocks_1_to_n == pytest.approx(2 / 3) and r.acceptance_all_blocks == pytest.approx(0.5)
    import json

    d = json.loads(r.to_json())
    assert d["blocks"][1]["producer"] == "drafter" and d["drafter_forwards"] == 3 * 6
    assert r.counted_speedup == pytest.approx(r.target_only_cost / (r.drafter_forwards + 7.4 * r.target_forwards))
    assert "acceptance blocks 1..N-1: 66.7%" in r.table()


# ---------------------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------------------

def test_bad_inputs_give_clear_errors(models):
    with pytest.raises(ValueError, match="tau must be a number"):
        ThresholdPolicy(tau=float("nan"))
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        _spec(blocks=0)
    with pytest.raises(ValueError, match="width 50 is not a positive multiple of 16"):
        _spec(w=50)
    with pytest.raises(ValueError, match="height 40 is not a positive multiple of 16"):
        _spec(h=40)
    other = PRESETS["tiny"].__class__(**{**PRESETS["tiny"].__dict__, "name": "x", "in_dim": 32, "out_dim": 32})
    with pytest.raises(ValueError, match="drafter and target disagree on latent channels"):
        Engine(models.target, models.vae, CausalWan(build_random(other), other, key="other"))
    bad = GenerationSpec(PromptConditioning.make("p", torch.zeros(1, 512, 4096)), W, H, 2, 0)
    with pytest.raises(ValueError, match="prompt embeddings have width 4096 but the target expects 32"):
        _engine(models).start(bad)
    with pytest.raises(ValueError, match="NaN"):
        PromptConditioning.make("p", torch.full((1, 4, 32), float("nan")))
    e = _engine(models)
    with pytest.raises(ValueError, match="draft the block first"):
        e.decode_draft(e.start(_spec()))


@pytest.mark.slow
def test_zero_memo_budget_still_decodes_each_block_once(models):
    """The decoder cache after the newest block is held outside the budget: no re-decoding from the start; what
    the generation held is released when it ends."""
    e = _engine(models, SelfForcingRecipe(), memo_bytes=0)
    held = []
    s = e.generate(_spec(), TargetOnly(), on_block=lambda eng, st: held.append(eng.memo.pinned_bytes))
    assert len(e.memo) == 0 and min(held) > 0 and e.memo.pinned_bytes == 0
    assert sum(r.work["vae_decode_frames"] for r in s.blocks) == BLOCKS * 3
    ref = _engine(models, SelfForcingRecipe()).generate(_spec(), TargetOnly())
    assert torch.equal(_latents(s), _latents(ref))
    assert sum(r.work["target_forwards"] for r in s.blocks) == sum(r.work["target_forwards"] for r in ref.blocks)


# ---------------------------------------------------------------------------------------------------------
# The seams: stable model identity, frozen records, recipes owning their context
# ---------------------------------------------------------------------------------------------------------

def test_models_without_a_stable_key_are_refused(models):
    keyless = CausalWan(models.target.net, models.target.cfg)  # key None
    with pytest.raises(ValueError, match="the target model .* has no stable `key`"):
        Engine(keyless, models.vae)
    vae = WanVAE(models.vae.config)  # a fresh VAE has key None
    with pytest.raises(ValueError, match="the VAE .* has no stable `key`"):
        Engine(models.target, vae)


def test_block_records_are_really_immutable(models):
    s = _engine(models).generate(_spec(blocks=2), ThresholdPolicy(tau=-0.5))
    r = s.blocks[1]
    for name in ("work", "cost", "seconds"):
        with pytest.raises(TypeError):
            getattr(r, name)["drafter_forwards"] = 99
        with pytest.raises(AttributeError):
            getattr(r, name).clear()
    assert isinstance(r.frame_scores, tuple) and isinstance(r.reused, tuple)
    assert dict(r.work)["drafter_forwards"] == r.work["drafter_forwards"] and hash(r.work) == hash(r.work)
    import pickle

    assert pickle.loads(pickle.dumps(r.cost)) == r.cost


def test_engine_has_no_recipe_specific_branches():
    import inspect

    import sdvg_core.engine.engine as eng

    src = inspect.getsource(eng)
    import re

    assert not re.search(r"isinstance\([^)]*recipe", src, re.IGNORECASE)
    assert "SelfForcingRecipe" not in src  # the engine names no recipe but its default (KreaRecipe)


@pytest.mark.slow
def test_a_new_recipe_is_one_class(models):
    """A recipe with its own context rule (here: no context at all, every block starts fresh) plugs in as is."""
    from dataclasses import dataclass

    from sdvg_core.sampling.timesteps import self_forcing_plan

    @dataclass(frozen=True)
    class NoContext:
        name: str = "no_context"
        rebuilds_context_every_block = False
        has_reference_sdvg = False
        supports_prompt_switch = False

        @property
        def plan(self):
            return self_forcing_plan()

        def window_frames(self, frames_per_block, num_latent_frames):
            return frames_per_block

        def query_frames(self, frames_per_block):
            return frames_per_block

        def pixel_history(self, temporal_compression):
            return 0

        def validate(self, spec):
            pass

        def context_forwards(self, num_blocks, switches=0):
            return 0

        def context(self, host, role, dit, state, b, tally):
            return host.empty_kv(dit, state.spec, state.spec.frames_per_block), 0

    e = _engine(models, NoContext())
    s = e.generate(_spec(), TargetOnly())
    steps = e.recipe.plan.num_steps
    assert [r.work["target_forwards"] for r in s.blocks] == [steps] * BLOCKS  # no context forwards
    # with no context, every block is the same function of its own noise: block b equals a 1-block run's block 0
    one = _engine(models, NoContext()).generate(_spec(blocks=1), TargetOnly())
    assert torch.equal(s.blocks[0].latents, one.blocks[0].latents)
    assert not torch.equal(s.blocks[1].latents, s.blocks[0].latents)  # different noise per block
    # a recipe that cannot switch prompts is refused a schedule before any work, naming the recipes that can
    p0, p1 = (PromptConditioning.make(t, demo_embeddings(t, 32)) for t in ("a fox", "a forest"))
    switching = GenerationSpec(PromptSchedule.of([(0, p0), (2, p1)]), W, H, BLOCKS, 42)
    e = _engine(models, NoContext())
    with pytest.raises(ValueError, match=r"'no_context' cannot change the prompt.*block 2.*krea, self_forcing, "
                                         r"longlive, longlive_infinity"):
        e.start(switching)
    for recipe in (KreaRecipe(), SelfForcingRecipe(), LongLiveRecipe()):  # the built-in ones all can
        _engine(models, recipe).start(switching)


@pytest.mark.slow
def test_generation_under_inference_mode_equals_no_grad(models, tmp_path):
    """ComfyUI loads and runs models under torch.inference_mode (weights are inference tensors): same bits."""
    ref = _engine(models).generate(_spec(blocks=2), ThresholdPolicy(tau=-0.5))
    with torch.inference_mode():
        inf_models = tiny_models(seed=0, workdir=tmp_path)
        assert inf_models.target.net.blocks[0].modulation.is_inference()
        got = _engine(inf_models).generate(_spec(blocks=2), ThresholdPolicy(tau=-0.5))
        again = _engine(inf_models).generate(_spec(blocks=2), ThresholdPolicy(tau=-0.5))  # cached casts reused
    assert torch.equal(_latents(got), _latents(ref)) and torch.equal(_latents(again), _latents(ref))
