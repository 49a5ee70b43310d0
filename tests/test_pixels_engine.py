"""Pixels in through the public API (Engine, GenerationSpec(pixels=PixelInput...)): every pixels_tiny run reproduced
at <= 1e-4 (docs/pixels.md; the golden pixels fixture), for the target alone and with the drafter making every
block after block 0 (both roles see the same given context); the output begins with the given frames; memo lineage
(a tau re-queue reuses the prefix, a new image reuses nothing); video-to-video reads its input as the run goes and
ends the run where the input ends.
"""
from __future__ import annotations

import pytest
import torch

from pixels_reference import PixelsFixture, load_fixture
from sdvg_core import (BlockNoise, CausalWan, DraftOnly, Engine, EngineConfig, GenerationSpec, KreaRecipe, PixelInput,
                       PixelInputError, PromptConditioning, SelfForcingRecipe, TargetOnly, build_report)

TOL = 1e-4  # each pixels-in fixture run matches at <= 1e-4 through the public API
SF_RUNS = ("start_frame", "extend")
KREA_RUNS = ("v2v_s070", "v2v_s050", "v2v_stream", "krea_start_frame")


@pytest.fixture(scope="module")
def fx() -> PixelsFixture:
    from conftest import require_shared

    fixture = load_fixture(require_shared("fixtures"))  # skips with a message when the fixtures are absent
    fixture.vae.key = "pixels-tiny-vae"
    return fixture


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float().reshape(a.shape)).abs().max().item()


def _noise(fx: PixelsFixture, name: str):
    """The fixture's random draws as the engine's per-block noise: each block's initial draw (for video-to-video its
    input-noising eps) and its re-noising draws, padded to the engine's count."""
    T, F = fx.T, 3
    if name in SF_RUNS:
        def noise(spec, b):
            return BlockNoise(T["initial_noise"][:, F * b:F * (b + 1)], T["renoise_noise"][b][:, None])
        noise.key = f"pixels-fixture-{name}"
        return noise
    draws = [T[f"{name}/draw{i}"] for i in range(len(fx.meta["krea"][name]["random_draws"]))]
    steps = 4  # re-noising draws per block (5 calls)

    def noise(spec, b):
        if name == "krea_start_frame":  # the session draw shifted by the 3 start frames (PIXELS.md P5)
            initial, ren = draws[0][:, 3 + F * b:6 + F * b], draws[1 + steps * b:1 + steps * (b + 1)]
        elif name == "v2v_stream":  # per block: randn_like (the eps), then the re-noising draws
            first = 1 + (steps + 1) * b
            initial, ren = draws[first], draws[first + 1:first + 1 + steps]
        else:  # file v2v: the eps drawn once for the clip (draw1), the re-noising draws from draw2 on
            initial, ren = draws[1][:, F * b:F * (b + 1)], draws[2 + steps * b:2 + steps * (b + 1)]
        return BlockNoise(initial.reshape(1, F, *initial.shape[-3:]), torch.stack(ren)[:, None])
    noise.key = f"pixels-fixture-{name}"
    return noise


def _pixels(fx: PixelsFixture, name: str) -> PixelInput:
    T = fx.T
    video01 = (T["vae_encode/video"][0].permute(1, 2, 3, 0) + 1) / 2  # [13, H, W, 3] in [0, 1]
    clip01 = T["input_clip_u8"].float() / 255  # [57, H, W, 3]
    if name == "start_frame":
        return PixelInput.start_image(video01[:1].clamp(0, 1))
    if name == "extend":
        return PixelInput.extend(video01[:9].clamp(0, 1))
    if name == "krea_start_frame":
        return PixelInput.start_image(T["start_image_u8"].float()[None] / 255)
    return PixelInput.video_to_video(clip01, fx.meta["krea"][name]["strength"])


def _run(fx: PixelsFixture, name: str, drafted: bool = False, memo=None):
    sf = name in SF_RUNS
    recipe = SelfForcingRecipe() if sf else KreaRecipe()
    target = CausalWan(fx.net, fx.dit_cfg, key="pixels-tiny-target")
    drafter = CausalWan(fx.net, fx.dit_cfg, key="pixels-tiny-drafter") if drafted else None
    engine = Engine(target, fx.vae, drafter, config=EngineConfig(recipe=recipe, decode_rule="standard" if sf else "krea"),
                    noise_fn=_noise(fx, name), memo=memo)
    blocks = fx.meta["sizes"]["blocks"] if sf else fx.meta["krea"][name]["blocks_generated"]
    prompt = PromptConditioning.make("pixels fixture", fx.T["text_context"])
    spec = GenerationSpec(prompt, width=48, height=32, num_blocks=blocks, seed=0, pixels=_pixels(fx, name))
    state = engine.generate(spec, DraftOnly(force_reject_first=True) if drafted else TargetOnly())
    return engine, state


def _expected(fx: PixelsFixture, name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(generated latents, given latents) the reference produced."""
    T = fx.T
    if name in SF_RUNS:
        given = T[f"{name}/initial_latent"]
        return T[f"{name}/output_latents"][:, given.shape[1]:], given
    latents = T[f"{name}/all_latents"]
    if name == "krea_start_frame":
        return latents[:, 3:], T[f"{name}/encode0/latent"].permute(0, 2, 1, 3, 4)
    return latents, None


@pytest.mark.parametrize("drafted", [False, True], ids=["target", "drafter"])
@pytest.mark.parametrize("name", SF_RUNS + KREA_RUNS)
def test_fixture_run_through_the_engine(fx, name, drafted):
    engine, state = _run(fx, name, drafted)
    want, given = _expected(fx, name)
    got = state.committed_latents()
    assert got.shape == want.shape, (name, got.shape, want.shape)
    worst = {"latents": _diff(got, want)}
    if given is not None:  # the given latents the recipe's context started from
        worst["given"] = _diff(state.given.of(engine.recipe.given_encoding), given)
    producers = [b.producer for b in state.blocks]
    assert producers == ["target"] + ["drafter" if drafted else "target"] * (len(producers) - 1)
    print(f"\n[pixels engine {name} {'drafter' if drafted else 'target'}] " +
          ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


# ------------------------------------------------------------------------------------------ the tiny demo models
from sdvg_core import LongLiveRecipe, ThresholdPolicy, tiny_models  # noqa: E402
from sdvg_core.demo.tiny import DEMO_PROMPT  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402

W, H = 48, 32
RECIPES = {"krea": KreaRecipe(), "self_forcing": SelfForcingRecipe(), "longlive": LongLiveRecipe(),
           "longlive_infinity": LongLiveRecipe(variant="infinity")}
MODES = ("start_image", "extend", "video_to_video")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _video(frames: int, seed: int = 0, hw: tuple[int, int] = (H, W)) -> torch.Tensor:
    """A smooth random clip [T, H, W, 3] in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.rand(1, 3, 4, 6, generator=gen)
    drift = torch.rand(1, 3, 4, 6, generator=gen)
    t = torch.linspace(0, 1, frames).view(frames, 1, 1, 1)
    small = (base * (1 - t) + drift * t)  # [T, 3, 4, 6]
    return torch.nn.functional.interpolate(small, size=hw, mode="bilinear", align_corners=False).permute(0, 2, 3, 1)


def _given(mode: str, seed: int = 0, frames: int = 57, strength: float = 0.7) -> PixelInput:
    if mode == "start_image":
        return PixelInput.start_image(_video(1, seed))
    if mode == "extend":
        return PixelInput.extend(_video(frames - 4, seed))  # 53 frames: 14 latents, not a whole number of blocks
    return PixelInput.video_to_video(_video(frames, seed), strength)


def _tiny_spec(pixels: PixelInput | None, blocks: int = 4, seed: int = 42) -> GenerationSpec:
    return GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), W, H, blocks, seed,
                          pixels=pixels)


def _tiny_engine(m, recipe, memo=None) -> Engine:
    return Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(recipe=recipe), memo=memo)


def _forwards(state) -> int:
    return sum(r.work["drafter_forwards"] + r.work["target_forwards"] for r in state.blocks)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_and_mode_runs_and_the_output_begins_with_the_given_frames(models, name, mode):
    e = _tiny_engine(models, RECIPES[name])
    state = e.generate(_tiny_spec(_given(mode), blocks=3), ThresholdPolicy(tau=-1e9))
    assert [r.producer for r in state.blocks] == ["target", "drafter", "drafter"]  # block 0: still the target's
    assert state.blocks[0].decision == "forced"
    frames = e.frames(state)
    # Krea's decoder restarts at block 0 after given frames: its first 3 frames are left out, as Krea's server
    # (release_server.py, `pixels[:, 3:]` for block 0) leaves them out; SF/LongLive decode through the given latents
    # (block 0 continues them: 12 frames) and video-to-video keeps all 9 (frame i restyles input frame i)
    hidden = 3 if name == "krea" and mode != "video_to_video" else 0
    assert state.given.hidden_frames == hidden
    generated = torch.cat([e.block_frames(state, b)[hidden if b == 0 else 0:] for b in range(3)])
    pieces = list(e.output_frames(state))  # the given frames' pieces, then one per block
    given = torch.cat(pieces[:len(pieces) - len(state.blocks)]) if mode != "video_to_video" else torch.zeros(0, H, W, 3)
    assert frames.shape[0] == given.shape[0] + generated.shape[0]
    assert torch.equal(frames[:given.shape[0]], given) and torch.equal(frames[given.shape[0]:], generated)
    report = build_report(state, "", e.recipe, e.plan_for(state.spec).num_steps)
    assert report.pixels == {"mode": mode, "strength": state.spec.pixels.strength, "given_frames": state.given_frames,
                             "digest": state.spec.pixels.digest, "source_fps": None, "frame_rate": None}
    if mode == "start_image":
        assert state.given_frames == 1
        if name == "krea":  # Krea's output begins with the image as read; SF/LongLive decode its latent
            assert given.shape[0] == 1 and _diff(given[0], _video(1)[0]) < 1e-6
        else:
            assert given.shape[0] == 1
    elif mode == "extend":
        # Krea encodes the whole clip (53 frames = 14 latents); SF/LongLive its last whole blocks (12 latents, 45)
        assert state.given_frames == (53 if name == "krea" else 45) == given.shape[0]
    else:
        assert state.given_frames == 9 + 12 * 2 and given.shape[0] == 0
        assert generated.shape[0] == 9 + 12 * 2


def test_text_to_video_report_has_no_pixels_and_the_identity_is_unchanged(models):
    spec = _tiny_spec(None)
    assert spec.identity() == _tiny_spec(None).identity() and "pixels" not in spec.identity()
    e = _tiny_engine(models, KreaRecipe())
    state = e.generate(_tiny_spec(None, blocks=1), TargetOnly())
    assert build_report(state, "", e.recipe, e.recipe.plan.num_steps).pixels is None and state.given is None


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["krea", "self_forcing", "longlive"])
def test_requeue_after_moving_tau_reuses_every_block_before_the_first_flip(models, name, mode):
    recipe = RECIPES[name]
    spec = _tiny_spec(_given(mode))
    e = _tiny_engine(models, recipe)
    first = e.generate(spec, ThresholdPolicy(tau=-1e9))
    scores = [r.score for r in first.blocks]
    k = min(range(1, 4), key=lambda i: scores[i])  # the lowest-scoring drafted block flips first
    tau2 = scores[k] + 1e-6
    if any(scores[i] < tau2 for i in range(1, k)):
        pytest.skip("tie in the tiny scores")
    second = e.generate(spec, ThresholdPolicy(tau=tau2))
    fresh = _tiny_engine(models, recipe).generate(spec, ThresholdPolicy(tau=tau2))
    assert torch.equal(second.committed_latents(), fresh.committed_latents())
    assert second.blocks[k].decision == "rejected"
    for r in second.blocks[:k]:  # nothing recomputed before the flip (given latents, prefix calls, input blocks)
        assert r.work["drafter_forwards"] == 0 and r.work["target_forwards"] == 0 and r.work["vae_encodes"] == 0, r
    assert second.blocks[k].work["drafter_forwards"] == 0 and second.blocks[k].work["target_forwards"] > 0
    assert _forwards(second) < _forwards(fresh)
    third = e.generate(spec, ThresholdPolicy(tau=-1e9))  # back to the first tau: everything reused
    assert _forwards(third) == 0 and torch.equal(third.committed_latents(), first.committed_latents())


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["krea", "self_forcing"])
def test_changing_the_given_pixels_or_the_strength_reuses_nothing(models, name, mode):
    e = _tiny_engine(models, RECIPES[name])
    policy = ThresholdPolicy(tau=-1e9)
    first = e.generate(_tiny_spec(_given(mode, seed=0), blocks=3), policy)
    again = e.generate(_tiny_spec(_given(mode, seed=0), blocks=3), policy)
    assert _forwards(again) == 0  # the same pixels (a new PixelInput of equal frames): all reused
    changed = [_given(mode, seed=1)]
    if mode == "video_to_video":
        changed.append(_given(mode, seed=0, strength=0.9))  # same input, another strength
    for pixels in changed:
        other = e.generate(_tiny_spec(pixels, blocks=3), policy)
        alone = _tiny_engine(models, RECIPES[name]).generate(_tiny_spec(pixels, blocks=3), policy)
        assert _forwards(other) == _forwards(alone), pixels
        assert not any(r.reused for r in other.blocks), [r.reused for r in other.blocks]
        assert not torch.equal(other.committed_latents(), first.committed_latents())


def test_digest_names_the_pixels_not_the_object():
    a, b = PixelInput.start_image(_video(1)), PixelInput.start_image(_video(1).clone())
    assert a.digest == b.digest and a == b
    assert PixelInput.start_image(_video(1, seed=1)).digest != a.digest
    v = _video(20)
    assert PixelInput.extend(v).identity() != PixelInput.video_to_video(v, 1.0).identity()
    assert PixelInput.video_to_video(v, 0.5).identity() != PixelInput.video_to_video(v, 0.6).identity()


def test_block_zero_may_be_drafted_with_pixels_when_force_reject_first_is_off(models):
    e = _tiny_engine(models, KreaRecipe())
    state = e.generate(_tiny_spec(_given("start_image"), blocks=2), ThresholdPolicy(tau=-1e9, force_reject_first=False))
    assert [r.producer for r in state.blocks] == ["drafter", "drafter"]


class CountingFrames:
    """A frame source that records every read (opens and frames handed out)."""

    def __init__(self, frames: torch.Tensor):
        from sdvg_core.given.sources import TensorFrames

        self.inner = TensorFrames(frames, "counting-" + str(frames.shape[0]))
        self.name, self.digest = self.inner.name, self.inner.digest
        self.opens, self.frames_read = [], 0

    def source_hw(self):
        return self.inner.source_hw()

    def count(self):
        raise AssertionError("video-to-video never counts its input up front (it is read as the run goes)")

    def pieces(self, run_hw, start=0, stop=None, piece_frames=4):
        self.opens.append(start)
        for p in self.inner.pieces(run_hw, start, stop, piece_frames):
            self.frames_read += p.shape[2]
            yield p


def test_video_to_video_reads_the_input_as_the_run_goes_and_stops_where_it_ends(models, capsys):
    src = CountingFrames(_video(9 + 12 + 5))  # block 0 (9 frames), block 1 (12), then 5: not a block
    pixels = PixelInput("video_to_video", src, 0.7)
    e = _tiny_engine(models, KreaRecipe())
    reads = []
    state = e.generate(_tiny_spec(pixels, blocks=4), ThresholdPolicy(tau=-1e9),
                       on_block=lambda eng, st: reads.append(src.frames_read))
    assert len(state.blocks) == 2 and state.stopped is not None and "block 2" in state.stopped
    assert state.stop_cause == "input_ended"
    assert len(reads) == 2  # on_block runs per committed block only, not for the stop
    assert src.opens == [0]  # one reader for the run, never re-opened
    # block 0 held at most its 9 frames plus a piece of look-ahead; block 1 at most 21 + 4
    assert reads[0] <= 9 + 4 and reads[1] <= 21 + 4
    report = build_report(state, "", e.recipe, e.plan_for(state.spec).num_steps)
    assert report.stopped == state.stopped and report.pixels["given_frames"] == 21
    assert e.frames(state).shape[0] == 21


def test_video_to_video_longer_input_is_cut(models):
    src = CountingFrames(_video(200))
    e = _tiny_engine(models, KreaRecipe())
    state = e.generate(_tiny_spec(PixelInput("video_to_video", src, 0.7), blocks=2), TargetOnly())
    assert len(state.blocks) == 2 and state.stopped is None and state.given_frames == 21
    assert src.frames_read <= 21 + 4  # never read past what the run needs (plus one piece)


def test_video_to_video_blocks_start_from_the_noised_input_at_the_strength(models):
    """Krea: the first call is at t0 of the strength plan and its input is the input latents noised with a = t0/1000
    and the block's own initial draw; drafter and target start from the same noised input."""
    from sdvg_core.given.stream import InputVideo
    from sdvg_core.engine.noise import block_noise
    from sdvg_core.sampling.timesteps import krea_strength_plan, noise_input

    seen = {}
    tracer = lambda name, t: seen.setdefault(name, t.clone())  # noqa: E731
    e = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(recipe=KreaRecipe()),
               tracer=tracer)
    spec = _tiny_spec(_given("video_to_video", strength=0.5), blocks=2)
    state = e.generate(spec, ThresholdPolicy(tau=1e9))  # every draft made, scored, rejected: both roles ran block 1
    plan = krea_strength_plan(0.5)
    from sdvg_core.derived.tally import Tally
    inputs = InputVideo(models.vae, e.model_keys["vae"], e.memoiser, lambda: None)
    latents = inputs.block(state, 1, Tally())
    noise = block_noise(spec.seed, 1, tuple(latents.shape), e.config.num_renoise)
    want = noise_input(latents, noise.initial, plan)
    assert torch.equal(seen["drafter/block1/step0/model_input"], want)
    assert torch.equal(seen["target/block1/step0/model_input"], want)
    assert e.plan_for(spec).timesteps == plan.timesteps and e.plan_for(spec).num_steps == 5
    assert state.blocks[1].cost["target_forwards"] == 5 + 1  # the plan's 5 calls + the rebuild


def test_self_forcing_refuses_a_strength_below_its_last_trained_step(models):
    e = _tiny_engine(models, SelfForcingRecipe())
    with pytest.raises(ValueError, match="at least 0.25"):
        e.start(_tiny_spec(_given("video_to_video", strength=0.2)))
    assert e.plan_for(_tiny_spec(_given("video_to_video", strength=0.7))).num_steps == 2  # 833.3, 625


def test_given_pixels_are_fitted_and_refused_when_the_crop_loses_more_than_half():
    wide = _video(1, hw=(32, 200))  # aspect 6.25 vs the run's 1.5: the crop drops 76%
    with pytest.raises(PixelInputError, match="crop away"):
        _tiny_spec(PixelInput.start_image(wide))
    _tiny_spec(PixelInput.start_image(_video(1, hw=(32, 64))))  # drops 25%: fitted when the run starts


def test_an_extension_shorter_than_a_block_is_refused_when_the_run_starts(models):
    e = _tiny_engine(models, SelfForcingRecipe())
    with pytest.raises(PixelInputError, match="at least 9"):
        e.start(_tiny_spec(PixelInput.extend(_video(8))))


@pytest.mark.slow
def test_self_forcing_extends_from_the_last_whole_blocks_of_the_video(models):
    """53 frames encode to 14 latents: SF takes the last 4 blocks' worth (12 latents = the last 45 frames), so the
    continuation follows the video's last frame; Krea encodes the clip whole (53 frames)."""
    from sdvg_core.given.encode import encode_clip
    from sdvg_core.given.fit import as_vae_frames

    clip = _video(53)
    e = _tiny_engine(models, SelfForcingRecipe())
    state = e.start(_tiny_spec(PixelInput.extend(clip)))
    want = encode_clip(models.vae, as_vae_frames(clip[53 - 45:], (H, W)), (H, W))
    assert torch.equal(state.given.of(e.recipe.given_encoding), want) and state.given_frames == 45
    k = _tiny_engine(models, KreaRecipe())
    state = k.start(_tiny_spec(PixelInput.extend(clip)))
    assert torch.equal(state.given.of(k.recipe.given_encoding), encode_clip(models.vae, as_vae_frames(clip, (H, W)), (H, W)))


@pytest.mark.slow
def test_given_and_input_latents_are_keyed_by_encoding_size_vae_and_decode_rule(models):
    """One memo shared by engines (a ComfyUI server): the given latents of each recipe's encoding, each size and
    each VAE are their own entries, and so are a video-to-video input's blocks and the decoder cache after the given
    latents (per decode rule)."""
    from sdvg_core import TieredMemo
    from sdvg_core.demo.tiny import random_vae
    from sdvg_core.derived.tally import Tally

    memo = TieredMemo.split(1 << 30)
    image, clip = _given("start_image"), _given("video_to_video")

    def engine(vae=models.vae, rule="standard", **recipes):
        return Engine(models.target, vae, models.drafter, models.scorer,
                      EngineConfig(decode_rule=rule, **recipes), memo=memo)

    mixed = engine(drafter_recipe=KreaRecipe(), target_recipe=SelfForcingRecipe())
    st = mixed.start(_tiny_spec(image))
    assert st.given.of(KreaRecipe().given_encoding).shape[1] == 3  # the image repeated into 3 latents
    assert st.given.of(SelfForcingRecipe().given_encoding).shape[1] == 1  # the image alone
    big = GenerationSpec(st.spec.prompt, 64, 48, 2, 42, pixels=image)
    assert mixed.start(big).given.of(KreaRecipe().given_encoding).shape[-2:] == (6, 8)
    other_vae = random_vae(7)
    alone = Engine(models.target, other_vae, config=EngineConfig(recipe=KreaRecipe())).start(_tiny_spec(image))
    shared = engine(vae=other_vae, recipe=KreaRecipe()).start(_tiny_spec(image))
    assert torch.equal(shared.given.of(KreaRecipe().given_encoding), alone.given.of(KreaRecipe().given_encoding))
    # input blocks: per size and per VAE
    k = engine(recipe=KreaRecipe())
    small = k.start(_tiny_spec(clip))
    assert k.given.inputs.block(small, 0, Tally()).shape[-2:] == (4, 6)
    big_v2v = k.start(GenerationSpec(st.spec.prompt, 64, 48, 2, 42, pixels=clip))
    assert k.given.inputs.block(big_v2v, 0, Tally()).shape[-2:] == (6, 8)
    o = engine(vae=other_vae, recipe=KreaRecipe())
    fresh = Engine(models.target, other_vae, config=EngineConfig(recipe=KreaRecipe()))
    assert torch.equal(o.given.inputs.block(o.start(_tiny_spec(clip)), 0, Tally()),
                       fresh.given.inputs.block(fresh.start(_tiny_spec(clip)), 0, Tally()))
    # the decoder cache after an SF start image: per decode rule, per VAE and per image (the root lineage)
    for vae, rule, img in ((models.vae, "standard", image), (models.vae, "krea", image),
                           (other_vae, "standard", image), (models.vae, "standard", _given("start_image", seed=3))):
        e = engine(vae=vae, rule=rule, recipe=SelfForcingRecipe())
        s = e.generate(_tiny_spec(img, blocks=1), TargetOnly())
        ref = Engine(models.target, vae, config=EngineConfig(recipe=SelfForcingRecipe(), decode_rule=rule))
        r = ref.generate(_tiny_spec(img, blocks=1), TargetOnly())
        assert torch.equal(e.block_frames(s, 0), ref.block_frames(r, 0)), (vae.key, rule)


def test_reading_and_encoding_the_input_is_each_blocks_input_phase(models, monkeypatch):
    """The time a block spends reading and encoding its input is in its record, as the `input` phase (and in the
    table's column): a source whose every piece takes 10 s of a fake clock shows 10 s per piece read in the block
    that read it; a start image's encode is block 0's."""
    from sdvg_core.derived import tally

    clock = [0.0]
    monkeypatch.setattr(tally.time, "perf_counter", lambda: clock[0])

    class SlowFrames(CountingFrames):
        def pieces(self, run_hw, start=0, stop=None, piece_frames=4):
            for p in super().pieces(run_hw, start, stop, piece_frames):
                clock[0] += 10.0
                yield p

    src = SlowFrames(_video(9 + 12))
    e = _tiny_engine(models, KreaRecipe())
    state = e.generate(_tiny_spec(PixelInput("video_to_video", src, 0.7), blocks=2), ThresholdPolicy(tau=-1e9))
    pieces = [10.0 * n for n in (3, 3)]  # block 0: frames 0-11 (3 pieces for its 9), block 1: the next 3 for 9-20
    assert [r.seconds["input"] for r in state.blocks] == pieces
    assert all(sum(r.seconds.values()) >= r.seconds["input"] for r in state.blocks)
    report = build_report(state, "", e.recipe, e.plan_for(state.spec).num_steps)
    assert report.seconds["input"] == sum(pieces) and "  input " in report.table().splitlines()[2]
    clock[0] = 0.0
    monkeypatch.setattr(type(models.vae), "encode_stream",
                        lambda self, *a, _real=type(models.vae).encode_stream, **k: (clock.__setitem__(0, clock[0] + 5.0),
                                                                                      _real(self, *a, **k))[1])
    image = e.generate(_tiny_spec(_given("start_image"), blocks=1), TargetOnly())
    assert image.blocks[0].seconds["input"] >= 5.0  # the start image's encode, in block 0's record
