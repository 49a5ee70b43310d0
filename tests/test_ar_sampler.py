"""SDVG Sampler (AR video): SDVG inside ComfyUI core's autoregressive workflow, against the fake host.

Core's noise rule as an sdvg_core noise source (checked against a hand-written transcription of core's calls, a
shorter last block included); the step plan of given sigmas; core's block counting (any num_frame_per_block, the
last block shorter); the SAMPLER in SamplerCustomAdvanced (tests/fake_comfy: KSAMPLER, the guider, the latent format)
equal to the engine run on the same noise, with and without a start latent and a drafter, at block sizes 1..4; the
guider's conditioning reaching the models as given (a ConditioningConcat's rows, a short prompt's) and a
ConditioningCombine refused; the inputs each policy uses checked when the graph is validated; the model compiler off
while it runs and restored after; the target loaded by ComfyUI before its layers are called; the report. The
real-host proof that target-only equals core's Sampler AR Video is tests/comfy_ar_probe.py (tests/test_comfy_host.py),
and core's own templates with SDVG's sampler swapped in are run by tests/comfy_template_probe.py.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

import fake_host
from mini_executor import MiniExecutor
from node_env import EMB_FILE, PROMPT, write_tiny_models

SIZE = {"width": 64, "height": 48}
SIGMAS = "1.0, 0.9375, 0.8333333, 0.625, 0.0"  # Self-Forcing's four steps as a ManualSigmas string
SEED = 1234


# ------------------------------------------------------------------------------------------------ the noise rule
def core_rule(seed: int, block: int, shape: tuple[int, ...], steps: int, first: int, F: int) -> tuple:
    """Core's calls, written out: RandomNoise's whole-latent draw from torch.manual_seed(seed), then before each
    re-noise torch.manual_seed(seed + block * 1000 + i) and randn_like(denoised [1, C, bf, h, w]), where the block
    holds bf = min(F, frames left) frames (sample_ar_video's short last block)."""
    torch.manual_seed(seed)
    video = torch.randn(shape)
    start = first + block * F
    bf = min(F, shape[2] - start)
    initial = video[:, :, start:start + bf]
    renoise = []
    for i in range(steps):
        torch.manual_seed(seed + block * 1000 + i)
        renoise.append(torch.randn(shape[0], shape[1], bf, shape[3], shape[4]))
    return initial, renoise


@pytest.mark.parametrize("first", [0, 1])
def test_comfy_ar_noise_is_cores_rule(first):
    from sdvg_core.engine.noise import ComfyARNoise
    from sdvg_core.engine.prompts import PromptConditioning
    from sdvg_core.engine.state import GenerationSpec

    spec = GenerationSpec(PromptConditioning.make("x", torch.zeros(1, 4, 8)), 64, 48, 3, SEED)
    noise = ComfyARNoise(channels=16, num_renoise=3, first_frame=first)
    for b in range(3):
        got = noise(spec, b)
        initial, renoise = core_rule(SEED, b, (1, 16, first + 9, 6, 8), 3, first, 3)
        assert torch.equal(got.initial, initial.permute(0, 2, 1, 3, 4))
        assert got.renoise.shape == (3, 1, 3, 16, 6, 8)
        for i in range(3):
            assert torch.equal(got.renoise[i], renoise[i].permute(0, 2, 1, 3, 4)), (b, i)
    # the draws depend on (seed, block, step) only: another block's differ, the same call repeats
    assert not torch.equal(noise(spec, 0).renoise[0], noise(spec, 1).renoise[0])
    assert torch.equal(noise(spec, 2).renoise, noise(spec, 2).renoise)


@pytest.mark.parametrize("F,frames", [(1, 4), (2, 5), (3, 7), (4, 7)])
def test_comfy_ar_noise_is_cores_rule_at_any_block_size_and_a_short_last_block(F, frames):
    from sdvg_core.engine.noise import ComfyARNoise
    from sdvg_core.engine.prompts import PromptConditioning
    from sdvg_core.engine.state import GenerationSpec, blocks_for

    n = blocks_for(frames, F)
    spec = GenerationSpec(PromptConditioning.make("x", torch.zeros(1, 4, 8)), 64, 48, n, SEED, F, latent_frames=frames)
    noise = ComfyARNoise(channels=16, num_renoise=3, first_frame=1)
    for b in range(n):
        initial, renoise = core_rule(SEED, b, (1, 16, 1 + frames, 6, 8), 3, 1, F)
        got = noise(spec, b)
        assert torch.equal(got.initial, initial.permute(0, 2, 1, 3, 4)), b
        assert all(torch.equal(got.renoise[i], renoise[i].permute(0, 2, 1, 3, 4)) for i in range(3)), b


def test_comfy_ar_noise_key_names_the_rule_the_device_and_the_given_noise():
    from sdvg_core.engine.noise import ComfyARNoise, noise_identity

    video = torch.randn(1, 16, 9, 6, 8)
    keys = {ComfyARNoise().key, ComfyARNoise(first_frame=1).key, ComfyARNoise(video=video).key,
            ComfyARNoise(video=video + 1).key, ComfyARNoise(device="meta").key}
    assert len(keys) == 5 and all(k.startswith("comfy_ar|") for k in keys)
    assert ComfyARNoise(video=video).key == ComfyARNoise(video=video.clone()).key
    assert noise_identity(ComfyARNoise(), shared_memo=True) == ComfyARNoise().key  # usable with a shared memo


def test_the_cli_takes_cores_noise_rule():
    from sdvg_core.demo.cli import _build, parse_args
    from sdvg_core.engine.noise import ComfyARNoise

    engine, spec, _, _ = _build(parse_args(["--noise", "comfy_ar", "--blocks", "1"]), real=False)
    assert isinstance(engine.noise.fn, ComfyARNoise) and engine.noise.fn.first_frame == 0
    assert engine.keys is not None and parse_args([]).noise == "seeded"
    assert _build(parse_args(["--blocks", "1"]), real=False)[0].noise.fn is None
    with pytest.raises(SystemExit):
        parse_args(["--noise", "other"])


def test_cores_noise_rule_offsets_a_start_image_by_its_latent_frame():
    """As ARVideoI2V's start latent takes the video's first latent frame, a start image shifts block 0's slice of the
    whole-video noise by one frame; an extension or text-to-video does not."""
    from sdvg_core import GenerationSpec, PixelInput, PromptConditioning
    from sdvg_core.engine.noise import noise_source

    frames = torch.rand(20, 32, 48, 3)
    def spec(pixels):
        return GenerationSpec(PromptConditioning.make("p", torch.zeros(1, 4, 8)), 48, 32, 2, 1, pixels=pixels)
    firsts = [noise_source("comfy_ar", spec(p), 16, 3).first_frame
              for p in (PixelInput.start_image(frames), PixelInput.extend(frames), None)]
    assert firsts == [1, 0, 0] and noise_source("seeded", spec(None), 16, 3) is None


# ------------------------------------------------------------------------------------------------ sigmas and recipes
@pytest.mark.slow
def test_a_plan_of_given_sigmas_is_self_forcings_own_at_its_sigmas():
    from sdvg_core.demo.tiny import tiny_models
    from sdvg_core.engine.comfy_ar import sigma_plan, with_plan
    from sdvg_core.engine.config import EngineConfig
    from sdvg_core.engine.engine import Engine
    from sdvg_core.engine.noise import ComfyARNoise
    from sdvg_core.engine.policy import TargetOnly
    from sdvg_core.engine.recipes import SelfForcingRecipe
    from sdvg_core.engine.state import GenerationSpec, PromptConditioning
    from sdvg_core.io.text import demo_embeddings

    sf = SelfForcingRecipe()
    plan = sigma_plan(torch.tensor([float(s) for s in SIGMAS.split(",")]))
    assert plan.timesteps == sf.plan.timesteps and plan.sigmas == sf.plan.sigmas and plan.commit_clean
    m = tiny_models(seed=0)
    spec = GenerationSpec(PromptConditioning.make("a fox", demo_embeddings("a fox", m.target.cfg.text_dim)), 64, 48,
                          2, SEED)
    runs = []
    for recipe in (sf, with_plan(sf, plan)):
        e = Engine(m.target, m.vae, config=EngineConfig(recipe=recipe), noise_fn=ComfyARNoise(num_renoise=3))
        runs.append(torch.cat([b.latents for b in e.generate(spec, TargetOnly()).blocks], 1))
    assert torch.equal(runs[0], runs[1])
    other = with_plan(sf, sigma_plan([1.0, 0.75, 0.5, 0.0]))
    assert other != with_plan(sf, plan) and other.name == "self_forcing" and other.plan.num_steps == 3


@pytest.mark.parametrize("sigmas,why", [([1.0], "at least one step"), ([1.0, 0.5], "not 0"),
                                        ([1.0, 0.0, 0.5, 0.0], "strictly"), ([1.5, 0.5, 0.0], "strictly"),
                                        ([0.5, 0.9, 0.0], "strictly")])
def test_sigmas_core_loop_cannot_commit_are_refused(sigmas, why):
    from sdvg_core.engine.comfy_ar import sigma_plan

    with pytest.raises(ValueError, match=why):
        sigma_plan(sigmas)


def test_only_append_cache_recipes_run_cores_loop():
    from sdvg_core.engine.comfy_ar import sigma_plan, with_plan
    from sdvg_core.engine.recipes import KreaRecipe, LongLiveRecipe

    plan = sigma_plan([1.0, 0.5, 0.0])
    assert with_plan(LongLiveRecipe(), plan).window == LongLiveRecipe().window
    with pytest.raises(ValueError, match="appends to one"):
        with_plan(KreaRecipe(), plan)


def core_blocks(lat_t: int, n_init: int, F: int) -> list[int]:
    """sample_ar_video's blocks, written out: ceil((lat_t - n_init) / F) blocks, block b of min(F, frames left)."""
    sizes, start = [], n_init
    for _ in range(-(-(lat_t - n_init) // F)):
        bf = min(F, lat_t - start)
        sizes.append(bf)
        start += bf
    return sizes


@pytest.mark.parametrize("F", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("lat_t,n_init", [(21, 1), (21, 0), (7, 0), (7, 1), (2, 1), (1, 0)])
def test_the_blocks_are_cores_at_any_block_size_with_a_short_last_block(F, lat_t, n_init):
    """Core's I2V template (81 frames: 1 + 20 latent frames) at its num_frame_per_block 1, and any other size and
    length: the same blocks as core's loop makes, the last one shorter where F does not divide the frames left."""
    from sdvg_core.engine.comfy_ar import ARVideo
    from sdvg_core.engine.prompts import PromptConditioning
    from sdvg_core.engine.state import GenerationSpec

    video = ARVideo(lat_t, n_init, F)
    spec = GenerationSpec(PromptConditioning.make("x", torch.zeros(1, 4, 8)), 64, 48, video.num_blocks, 0, F,
                          latent_frames=video.latent_frames)
    assert [spec.block_frames(b) for b in range(spec.num_blocks)] == core_blocks(lat_t, n_init, F)


def test_a_latent_with_nothing_after_the_start_image_is_refused():
    from sdvg_core.engine.comfy_ar import ARVideo

    with pytest.raises(ValueError, match="nothing is left to generate.*at least 5"):
        ARVideo(1, 1, 1)


# ------------------------------------------------------------------------------------------------ the node in a host
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_ar")
    with fake_host.installed(base) as pack:
        write_tiny_models(base, pack.sdvg_core)
        from test_nodes_pixels import write_inputs

        write_inputs(base / "input")
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
        yield pack, classes, base


def ar_prompt(policy: str = "target_only", start_image: bool = False, length: int = 33, drafter: bool = True,
              drafter_model: bool | None = None, **sampler) -> dict:
    """An API prompt of core's AR workflow with SDVG's sampler: the target through UNETLoader into BasicGuider (or
    AR Video I2V first), the tiny drafter from SDVG Load Drafter (chunk-wise: blocks of 3) or, with `drafter_model`
    (the default at another num_frame_per_block), as a MODEL from UNETLoader into 'drafter', ManualSigmas,
    RandomNoise, SamplerCustomAdvanced, VAE Decode; SDVG AR Report into a viewer."""
    if drafter_model is None:
        drafter_model = sampler.get("num_frame_per_block", 3) != 3
    p = {
        "target": {"class_type": "UNETLoader", "inputs": {"unet_name": "krea-realtime-video-14b.safetensors",
                                                          "weight_dtype": "default"}},
        "drafter": {"class_type": "SDVGLoadDrafter", "inputs": {"model_name": "self_forcing_dmd.pt"}},
        "reward": {"class_type": "SDVGLoadImageReward", "inputs": {"reward_name": "ImageReward.pt", "dtype": "auto",
                                                                   "micro_batch": 16}},
        "vae": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
        "text": {"class_type": "SDVGLoadPromptEmbeddings", "inputs": {"embeddings": EMB_FILE}},
        "guider": {"class_type": "BasicGuider", "inputs": {"model": ["target", 0], "conditioning": ["text", 0]}},
        "sigmas": {"class_type": "ManualSigmas", "inputs": {"sigmas": SIGMAS}},
        "noise": {"class_type": "RandomNoise", "inputs": {"noise_seed": SEED}},
        "sampler": {"class_type": "SDVGSamplerARVideo", "inputs": {
            "num_frame_per_block": 3, "vae": ["vae", 0], "image_reward": ["reward", 0], "prompt": PROMPT,
            "policy": policy, "tau": -5.0,
            **({"drafter" if drafter_model else "sdvg_drafter": ["drafter", 0]} if drafter else {}), **sampler}},
        "latent": {"class_type": "EmptyARVideoLatent", "inputs": {**SIZE, "length": length, "batch_size": 1}},
        "sample": {"class_type": "SamplerCustomAdvanced", "inputs": {"noise": ["noise", 0], "guider": ["guider", 0],
                                                                     "sampler": ["sampler", 0], "sigmas": ["sigmas", 0],
                                                                     "latent_image": ["latent", 0]}},
        "report": {"class_type": "SDVGARReport", "inputs": {"samples": ["sample", 0]}},
        "show": {"class_type": "PreviewAny", "inputs": {"source": ["report", 0]}},
    }
    if drafter_model:
        p["drafter"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "self_forcing_dmd.pt",
                                                               "weight_dtype": "default"}}
    if start_image:
        from test_nodes_pixels import START_IMAGE

        p["image"] = {"class_type": "LoadImage", "inputs": {"image": START_IMAGE}}
        p["i2v"] = {"class_type": "ARVideoI2V", "inputs": {"model": ["target", 0], "vae": ["vae", 0],
                                                           "start_image": ["image", 0], **SIZE, "length": length,
                                                           "batch_size": 1}}
        p["guider"]["inputs"]["model"] = ["i2v", 0]
        p["sample"]["inputs"]["latent_image"] = ["i2v", 1]
    return p


def run(classes, prompt, fresh: bool = True):
    """Run the prompt on a new executor; `fresh`: with SDVG's shared cache emptied first (every block computed)."""
    if fresh:
        import sdvg_pack.nodes.shared_memo as shared

        shared.MEMO.clear()
    ex = MiniExecutor(classes)
    ex.run(prompt)
    return ex, ex.values["sample"][0]["samples"]


def engine_run(pack, ex, prompt, policy, start_latents=None, emb=None):
    """What the sampler must equal: the SDVG engine with the same models, core's sigmas as the plan (Self-Forcing's
    recipe), core's noise rule over the same noise (RandomNoise at sigma 1), the sampler's num_frame_per_block and core's
    blocks (a shorter last one), the start latent if any and the conditioning's rows as they are (`emb`: those rows,
    default the text node's), built here from sdvg_core directly (no sampler code)."""
    core, nodes = pack.sdvg_core, pack.nodes
    comfy_ar = __import__(core.__name__ + ".engine.comfy_ar", fromlist=["x"])
    from sdvg_pack.sdvg_core.engine.config import EngineConfig
    from sdvg_pack.sdvg_core.engine.engine import Engine
    from sdvg_pack.sdvg_core.engine.noise import ComfyARNoise
    from sdvg_pack.sdvg_core.engine.recipes import SelfForcingRecipe
    from sdvg_pack.sdvg_core.engine.state import PromptConditioning

    plan = comfy_ar.sigma_plan(torch.tensor([float(s) for s in SIGMAS.split(",")]))
    recipe = comfy_ar.with_plan(SelfForcingRecipe(), plan)
    target = nodes.comfy_model.host_comfy_model(ex.values["target"][0], "target")
    drafter = ex.values["drafter"][0] if "drafter" in ex.values else None
    if prompt["drafter"]["class_type"] == "UNETLoader" and drafter is not None:
        drafter = nodes.comfy_model.host_comfy_model(drafter, "drafter")
    vae = nodes.hosted.host_vae(ex.values["vae"][0])
    latent = ex.values["latent" if start_latents is None else "i2v"][-1]["samples"]
    g = 0 if start_latents is None else start_latents.shape[1]
    F = prompt["sampler"]["inputs"]["num_frame_per_block"]
    video = comfy_ar.ARVideo(latent.shape[2], g, F)
    gen = torch.Generator().manual_seed(SEED)
    noise = torch.randn(latent.shape, generator=gen)
    emb = ex.values["text"][0][0][0] if emb is None else emb
    spec = comfy_ar.StartLatentSpec(PromptConditioning.make(PROMPT, emb), SIZE["width"], SIZE["height"],
                                    video.num_blocks, SEED, F, latent_frames=video.latent_frames,
                                    start_digest="" if start_latents is None else comfy_ar.latent_digest(start_latents))
    engine = Engine(target.dit, vae, None if drafter is None else drafter.dit, ex.values["reward"][0],
                    EngineConfig(recipe=recipe), noise_fn=ComfyARNoise(num_renoise=plan.num_renoise, first_frame=g,
                                                                       video=noise))
    state = comfy_ar.generate(engine, spec, policy, start_latents)
    return pack.core_nodes.latent_out(comfy_ar.video_latents(state, start_latents)), state


@pytest.mark.slow
def test_target_only_equals_the_engine_on_cores_terms(env):
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import TargetOnly
    import comfy.samplers

    prompt = ar_prompt("target_only")
    ex, out = run(classes, prompt)
    want, state = engine_run(pack, ex, prompt, TargetOnly())
    assert out.shape == (1, 16, 9, 6, 8) and torch.equal(out, want)  # 3 blocks, in ComfyUI's raw latent space
    assert comfy.samplers.CALLS == []  # the guider was never called as a model: SDVG ran the layers
    report = json.loads(ex.values["report"][2])
    assert [b["decision"] for b in report["blocks"]] == ["forced"] * 3 and report["drafter_forwards"] == 0
    # the sampler gives latents (core's VAE Decode decodes them): with no draft to score, SDVG decodes nothing
    assert [b["work"].get("vae_decode_frames", 0) for b in report["blocks"]] == [0, 0, 0]


@pytest.mark.slow
def test_the_first_step_starts_from_the_noise_core_hands_the_sampler(env):
    """Sigmas starting below 1: the sampler's first input is the Noise node's draw scaled to the first sigma (what
    core's KSAMPLER hands it), not a draw of its own."""
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.comfy_ar import StartLatentSpec, generate, sigma_plan, video_latents, with_plan
    from sdvg_pack.sdvg_core.engine.config import EngineConfig
    from sdvg_pack.sdvg_core.engine.engine import Engine
    from sdvg_pack.sdvg_core.engine.noise import ComfyARNoise
    from sdvg_pack.sdvg_core.engine.policy import TargetOnly
    from sdvg_pack.sdvg_core.engine.recipes import SelfForcingRecipe
    from sdvg_pack.sdvg_core.engine.state import PromptConditioning

    sigmas = "0.9375, 0.8333333, 0.625, 0.0"
    prompt = ar_prompt("target_only", length=9)
    prompt["sigmas"]["inputs"]["sigmas"] = sigmas
    ex, out = run(classes, prompt)
    plan = sigma_plan(torch.tensor([float(v) for v in sigmas.split(",")]))
    target = pack.nodes.comfy_model.host_comfy_model(ex.values["target"][0], "target")
    video = torch.randn(1, 16, 3, 6, 8, generator=torch.Generator().manual_seed(SEED)) * plan.sigmas[0]
    emb = ex.values["text"][0][0][0]
    spec = StartLatentSpec(PromptConditioning.make(PROMPT, emb), SIZE["width"], SIZE["height"], 1, SEED)
    engine = Engine(target.dit, pack.nodes.hosted.host_vae(ex.values["vae"][0]),
                    config=EngineConfig(recipe=with_plan(SelfForcingRecipe(), plan)),
                    noise_fn=ComfyARNoise(num_renoise=plan.num_renoise, video=video))
    want = pack.core_nodes.latent_out(video_latents(generate(engine, spec, TargetOnly())))
    assert torch.allclose(out, want, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_with_a_drafter_the_blocks_are_the_engines_on_the_same_noise(env):
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import ThresholdPolicy

    prompt = ar_prompt("sdvg")
    ex, out = run(classes, prompt)
    want, state = engine_run(pack, ex, prompt, ThresholdPolicy(tau=-5.0))
    assert torch.equal(out, want)
    assert [b.producer for b in state.blocks] == ["target", "drafter", "drafter"]
    report = json.loads(ex.values["report"][2])
    assert [b["producer"] for b in report["blocks"]] == ["target", "drafter", "drafter"]
    assert report["drafter_forwards"] > 0
    # decoded only to score: draft 1 after block 0 (decoded then), draft 2 (its decode is the accepted one's)
    assert [b["work"].get("vae_decode_frames", 0) for b in report["blocks"]] == [0, 6, 3]


@pytest.mark.slow
def test_a_start_image_from_ar_video_i2v_starts_the_video(env):
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import TargetOnly

    prompt = ar_prompt("target_only", start_image=True, length=25)  # 7 latent frames: the start + two blocks
    ex, out = run(classes, prompt)
    model = ex.values["i2v"][0]
    start = pack.core_nodes.latent_in(model.model_options["transformer_options"]["ar_config"]["initial_latent"])
    assert torch.allclose(pack.core_nodes.latent_in(out[:, :, :1]), start, atol=1e-6)  # the start latent first
    want, state = engine_run(pack, ex, prompt, TargetOnly(), start.permute(0, 2, 1, 3, 4).contiguous())
    assert torch.equal(out, want) and state.given is not None and len(state.blocks) == 2
    # another start image, SDVG's cache kept: other blocks (the start latent is in the lineage: nothing is reused)
    from PIL import Image
    from test_nodes_pixels import START_IMAGE

    folder = pack.core_nodes.folder_paths.get_input_directory()
    Image.open(os.path.join(folder, START_IMAGE)).transpose(Image.FLIP_LEFT_RIGHT).save(os.path.join(folder, "flip.png"))
    other = ar_prompt("target_only", start_image=True, length=25)
    other["image"]["inputs"]["image"] = "flip.png"
    ex.run(other)  # the same executor: the loaders' outputs (the same models) come from its cache
    flipped = ex.values["sample"][0]["samples"]
    assert "target" in ex.cached and "i2v" not in ex.cached  # the same target; the start latent changed
    assert not torch.equal(flipped[:, :, 1:4], out[:, :, 1:4])


@pytest.mark.slow
def test_progress_decisions_and_the_report_files(env):
    pack, classes, base = env
    import server

    server.TEXTS.clear()
    ex, _ = run(classes, ar_prompt("sdvg"))
    on_sampler = [t for n, t in server.TEXTS if n == "sample"]
    on_node = [t for n, t in server.TEXTS if n == "sampler"]
    assert any("block 2/3: accepted -> drafter (min score" in t for t in on_sampler), on_sampler
    assert "block 1/3: forced -> target" in on_node[0] and "report: output/sdvg_ar/SDVG_AR_" in on_node[-1]
    rel = on_node[-1].split("report: output/")[1].split(".json")[0]
    data = json.loads((base / "output" / f"{rel}.json").read_text())
    assert len(data["blocks"]) == 3 and data["tau"] == -5.0 and os.path.getsize(base / "output" / f"{rel}.png") > 0
    assert ex.values["report"][0].startswith("report: output/sdvg_ar/") and ex.values["report"][1].shape[-1] == 3


@pytest.mark.slow
def test_the_compiler_is_off_while_sdvg_runs_and_restored_after(env, monkeypatch):
    """The newest hosts' switch (comfy.cli_args.args.disable_comfy_compiler, CUDA graphs likewise): every SDVG model
    call sees it off; afterwards it is as before, also after a Cancel mid-run; a graph recording on the thread is
    paused while SDVG runs; a host without the switch is left alone."""
    pack, classes, _ = env
    import comfy.cli_args
    import comfy.model_management as mm
    import comfy.model_prefetch as mp
    from sdvg_pack.sdvg_core.models.wan import CausalWan

    import comfy.utils

    seen, between = [], []
    real, real_bar = CausalWan.forward, comfy.utils.ProgressBar.update_absolute

    def state():
        a = comfy.cli_args.args
        return getattr(a, "disable_comfy_compiler", None), getattr(a, "disable_cuda_graphs", None), mp.recording()

    def spy(self, *a, **k):
        seen.append(state())
        return real(self, *a, **k)

    def bar(self, *a, **k):  # core's progress callback: inside the sampling, between SDVG's model calls
        between.append(state())
        return real_bar(self, *a, **k)

    monkeypatch.setattr(CausalWan, "forward", spy)
    monkeypatch.setattr(comfy.utils.ProgressBar, "update_absolute", bar)
    args = comfy.cli_args.args
    mp.malloc_graph_begin()  # a graph left recording on this thread (a model forward that opened one)
    try:
        run(classes, ar_prompt("sdvg", length=21))  # 2 blocks: one forced, one drafted
    finally:
        mp.malloc_graph_end()
    assert seen and all(s == (True, True, False) for s in seen), seen[:3]
    assert between and all(s == (True, True, False) for s in between), between  # the whole sampling, not per call
    assert (args.disable_comfy_compiler, args.disable_cuda_graphs) == (False, False)
    # Cancel in the middle: the switches come back
    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        if calls["n"] == 5:
            raise mm.InterruptProcessingException()

    monkeypatch.setattr(mm, "throw_exception_if_processing_interrupted", cancel)
    with pytest.raises(mm.InterruptProcessingException):
        run(classes, ar_prompt("target_only", length=21, cache_gb=0.0))
    assert (args.disable_comfy_compiler, args.disable_cuda_graphs) == (False, False)
    monkeypatch.setattr(mm, "throw_exception_if_processing_interrupted", lambda: None)
    # started with the compiler off: stays off
    monkeypatch.setattr(args, "disable_comfy_compiler", True)
    run(classes, ar_prompt("target_only", length=9, tau=-4.0))
    assert args.disable_comfy_compiler is True and args.disable_cuda_graphs is False
    # the 0.33.0 snapshot: CUDA graphs' switch only; older hosts neither (nothing set)
    monkeypatch.delattr(args, "disable_comfy_compiler")
    seen.clear()
    run(classes, ar_prompt("target_only", length=9, tau=-3.5))
    assert seen and all(s == (None, True, False) for s in seen) and args.disable_cuda_graphs is False
    # a command line that answers None for any name (the 0.12.1 pip build's Configuration): no switch there
    monkeypatch.setattr(args, "disable_cuda_graphs", None)
    seen.clear()
    run(classes, ar_prompt("target_only", length=9, tau=-3.2))
    assert seen and all(s == (None, None, False) for s in seen) and args.disable_cuda_graphs is None
    monkeypatch.delattr(args, "disable_cuda_graphs")
    seen.clear()
    run(classes, ar_prompt("target_only", length=9, tau=-3.0))
    assert seen and all(s == (None, None, False) for s in seen)
    assert not hasattr(args, "disable_comfy_compiler") and not hasattr(args, "disable_cuda_graphs")


def test_the_target_is_loaded_by_comfyui_before_its_layers_run(env, monkeypatch):
    """Dynamic VRAM streams a MODEL's weights per module once ComfyUI loaded it: SDVG calls load_models_gpu for the
    guider's MODEL before every call of its layers (never a layer of a MODEL ComfyUI has not loaded)."""
    pack, classes, _ = env
    import comfy.model_management as mm

    prompt = ar_prompt("target_only", length=21, tau=-2.0)
    pack.nodes.shared_memo.MEMO.clear()
    ex = MiniExecutor(classes)
    loaded_when_called = []
    real_load = mm.load_models_gpu

    def watch_blocks(patcher):
        net = patcher.model.diffusion_model
        for block in net.blocks:
            block.self_attn.q.register_forward_pre_hook(lambda m, a: loaded_when_called.append(
                any(lm.model is patcher for lm in mm.current_loaded_models) and patcher.loaded))

    def load(models, *a, **k):
        for p in models:
            if hasattr(getattr(p, "model", None), "diffusion_model") and not getattr(p, "_watched", False):
                p._watched = True
                watch_blocks(p)
        return real_load(models, *a, **k)

    monkeypatch.setattr(mm, "load_models_gpu", load)
    monkeypatch.setattr(mm, "FAKE_FREE_BYTES", 0)  # a full device: each load unloads the models loaded before it
    mm.unload_all_models()
    ex.run(prompt)
    assert loaded_when_called and all(loaded_when_called)


@pytest.mark.slow
def test_requests_core_loop_cannot_run_are_refused(env):
    pack, classes, _ = env
    errors = pack.nodes.surface.SDVGError
    with pytest.raises(errors, match="one video latent"):
        p = ar_prompt("target_only")
        p["latent"]["inputs"]["batch_size"] = 2
        run(classes, p)
    with pytest.raises(errors, match="nothing is left to generate"):
        run(classes, ar_prompt("target_only", start_image=True, length=1))


# ------------------------------------------------------------------------------------------------ block sizes
def test_the_default_block_size_is_cores(env):
    """Core's Sampler AR Video defaults to 1 frame per block (frame-wise Causal Forcing, its I2V template's): a
    workflow whose SamplerARVideo is swapped for SDVG's keeps that size when the widget is left as it is."""
    _, classes, _ = env
    schema = classes["SDVGSamplerARVideo"].GET_SCHEMA()
    (widget,) = [i for i in schema.inputs if i.id == "num_frame_per_block"]
    assert widget.as_dict()["default"] == 1


@pytest.mark.parametrize("F,length,policy", [(3, 25, "target_only"), (2, 25, "sdvg"), (1, 13, "sdvg"),
                                             (4, 21, "draft_only")],
                         ids=["3+3+1", "2x3+1_sdvg", "framewise_sdvg", "4+2_draft_only"])
def test_any_block_size_and_a_short_last_block_equal_the_engine(env, F, length, policy):
    """The sampler runs core's blocks at num_frame_per_block F, a shorter last block included, each routed on the
    frames it decodes to; its LATENT equals the engine's on core's terms."""
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import DraftOnly, TargetOnly, ThresholdPolicy

    prompt = ar_prompt(policy, length=length, num_frame_per_block=F)
    ex, out = run(classes, prompt)
    want_policy = {"target_only": TargetOnly(), "sdvg": ThresholdPolicy(tau=-5.0),
                   "draft_only": DraftOnly(force_reject_first=True)}[policy]
    want, state = engine_run(pack, ex, prompt, want_policy)
    latent_frames = (length - 1) // 4 + 1
    sizes = [min(F, latent_frames - b * F) for b in range(-(-latent_frames // F))]
    assert out.shape[2] == latent_frames and torch.equal(out, want)
    report = json.loads(ex.values["report"][2])
    assert [b["latent_frames"] for b in report["blocks"]] == sizes and report["frames_per_block"] == F
    if policy == "sdvg":  # each draft scored on the pixel frames its latent frames decode to (4 per latent frame)
        assert [len(b["frame_scores"]) for b in report["blocks"]] == [0] + [4 * n for n in sizes[1:]]


def test_a_start_image_with_frame_wise_blocks(env):
    """Core's I2V template's shape: a start image, then blocks of 1 latent frame, drafted and routed one frame at a
    time (here 1 + 4 latent frames)."""
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import ThresholdPolicy

    prompt = ar_prompt("sdvg", start_image=True, length=17, num_frame_per_block=1)
    ex, out = run(classes, prompt)
    model = ex.values["i2v"][0]
    start = pack.core_nodes.latent_in(model.model_options["transformer_options"]["ar_config"]["initial_latent"])
    want, state = engine_run(pack, ex, prompt, ThresholdPolicy(tau=-5.0), start.permute(0, 2, 1, 3, 4).contiguous())
    assert out.shape[2] == 5 and torch.equal(out, want)
    assert [b.producer for b in state.blocks] == ["target", "drafter", "drafter", "drafter"]


def test_a_chunk_wise_drafter_is_refused_at_another_block_size(env):
    """SDVG Load Drafter's kinds are trained for blocks of 3: at num_frame_per_block 1 the run is refused before any
    sampling, with the reason and the two ways out; a ComfyUI MODEL (whose block size nothing says) runs the
    workflow's."""
    pack, classes, _ = env
    with pytest.raises(pack.nodes.surface.SDVGError, match=r"trained for blocks of 3 latent frames.*"
                                                           r"num_frame_per_block is 1.*Load Diffusion Model"):
        run(classes, ar_prompt("sdvg", length=9, num_frame_per_block=1, drafter_model=False))
    _, out = run(classes, ar_prompt("draft_only", length=9, num_frame_per_block=1, drafter_model=True))
    assert out.shape[2] == 3


# ------------------------------------------------------------------------------------------------ the conditioning
def conditioning_prompt(policy: str = "target_only", join: str = "ConditioningConcat") -> dict:
    """ar_prompt with the guider's conditioning made of two prompts' embeddings (ConditioningConcat: one entry of
    both rows; ConditioningCombine: two entries)."""
    p = ar_prompt(policy, length=13)
    p["text2"] = {"class_type": "SDVGLoadPromptEmbeddings", "inputs": {"embeddings": EMB2_FILE}}
    inputs = ({"conditioning_to": ["text", 0], "conditioning_from": ["text2", 0]} if join == "ConditioningConcat"
              else {"conditioning_1": ["text", 0], "conditioning_2": ["text2", 0]})
    p["join"] = {"class_type": join, "inputs": inputs}
    p["guider"]["inputs"]["conditioning"] = ["join", 0]
    return p


EMB2_FILE = "second_prompt.safetensors"


@pytest.fixture(scope="module")
def second_prompt(env):
    pack, _, base = env
    text = "a red kite over the sea"
    pack.sdvg_core.save_embeddings(base / "models" / "sdvg_prompts" / EMB2_FILE, text,
                                   pack.sdvg_core.io.text.demo_embeddings(text, 32))
    return text


def test_the_conditioning_reaches_the_models_as_given(env, second_prompt):
    """A ConditioningConcat of two 512-row prompts reaches both models as its 1024 rows (core passes them as they
    are): equal to the engine on those rows, not on the first 512; a short conditioning (40 rows) is not padded."""
    pack, classes, _ = env
    from sdvg_pack.sdvg_core.engine.policy import TargetOnly

    prompt = conditioning_prompt()
    ex, out = run(classes, prompt)
    rows = ex.values["join"][0][0][0]
    assert rows.shape[1] == 1024
    want, _ = engine_run(pack, ex, prompt, TargetOnly(), emb=rows)
    cut, _ = engine_run(pack, ex, prompt, TargetOnly(), emb=rows[:, :512])
    assert torch.equal(out, want) and not torch.allclose(out, cut, atol=1e-3)
    short = ar_prompt("target_only", length=13)
    short["short"] = {"class_type": "ShortConditioning", "inputs": {"conditioning": ["text", 0]}}
    short["guider"]["inputs"]["conditioning"] = ["short", 0]
    ex, out = run({**classes, "ShortConditioning": ShortConditioning}, short)
    rows = ex.values["short"][0][0][0]
    want, _ = engine_run(pack, ex, short, TargetOnly(), emb=rows)
    padded = torch.cat([rows, rows.new_zeros(1, 512 - rows.shape[1], rows.shape[2])], 1)
    assert rows.shape[1] == 40 and torch.equal(out, want)
    assert not torch.allclose(out, engine_run(pack, ex, short, TargetOnly(), emb=padded)[0], atol=1e-3)


def test_a_combined_conditioning_is_refused_with_the_reason(env, second_prompt):
    pack, classes, _ = env
    with pytest.raises(pack.nodes.surface.SDVGError, match=r"holds 2 entries \(ConditioningCombine.*averages.*"
                                                           r"ConditioningConcat"):
        run(classes, conditioning_prompt(join="ConditioningCombine"))


class ShortConditioning:
    """A test node: the first 40 rows of a conditioning (a prompt shorter than Wan's 512, as another encoder gives)."""

    @classmethod
    def GET_SCHEMA(cls):
        from comfy_api.latest import io

        return io.Schema(node_id="ShortConditioning", category="test",
                         inputs=[io.Conditioning.Input("conditioning")], outputs=[io.Conditioning.Output()])

    @classmethod
    def execute(cls, conditioning):
        from comfy_api.latest import io

        return io.NodeOutput([[t[:, :40], dict(extra)] for t, extra in conditioning])


# ------------------------------------------------------------------------------------------------ inputs where used
def test_no_vae_is_needed_where_nothing_is_decoded(env):
    """target_only and draft_only decode nothing (the video is VAE Decode's): they run without a VAE, and equal the
    run with one."""
    pack, classes, _ = env
    for policy in ("target_only", "draft_only"):
        with_vae = run(classes, ar_prompt(policy, length=13))[1]
        prompt = ar_prompt(policy, length=13)
        del prompt["sampler"]["inputs"]["vae"]
        assert torch.equal(run(classes, prompt)[1], with_vae), policy


@pytest.mark.parametrize("missing,named", [("image_reward", "image_reward"), ("sdvg_drafter", "drafter"),
                                           ("vae", "'vae'")])
def test_an_input_policy_sdvg_uses_is_asked_for_when_the_graph_is_validated(env, missing, named):
    """Validation (ComfyUI's POST /prompt, before any node runs) refuses policy sdvg without a drafter, ImageReward or
    the VAE, naming the input; nothing runs."""
    from mini_executor import PromptInvalid

    _, classes, _ = env
    prompt = ar_prompt("sdvg")
    del prompt["sampler"]["inputs"][missing]
    ex = MiniExecutor(classes)
    with pytest.raises(PromptInvalid, match=named) as e:
        ex.run(prompt)
    assert e.value.class_type == "SDVGSamplerARVideo" and ex.executed == []
    assert pack_validate(classes, prompt, "target_only") is True  # target_only uses none of them


def pack_validate(classes, prompt, policy):
    node = classes["SDVGSamplerARVideo"]
    types = {k: "X" for k, v in prompt["sampler"]["inputs"].items() if isinstance(v, list)}
    return node.validate_inputs(policy=policy, input_types=types)


def test_a_guider_with_classifier_free_guidance_is_refused(env):
    from types import SimpleNamespace

    pack, _, _ = env
    ar = pack.nodes.ar_sampling
    cond = {"cross_attn": torch.zeros(1, 4, 32)}
    guider = SimpleNamespace(inner_model=None, cfg=5.0, conds={"positive": [cond], "negative": [cond]})
    r = ar.ARRun(None, SimpleNamespace(inner_model=guider), torch.zeros(1, 16, 3, 6, 8), torch.tensor([1.0, 0.0]), {},
                 None)
    with pytest.raises(pack.nodes.surface.SDVGError, match="classifier-free guidance"):
        r.conditioning()
    guider.cfg = 1.0  # cfg 1: the negative does nothing; the positive is the prompt
    assert torch.equal(r.conditioning(), cond["cross_attn"])


# ------------------------------------------------------------------------------------------------ the workflow
AR_WORKFLOW = fake_host.REPO / "workflows" / "sdvg_core_ar_sampler.json"


@pytest.mark.slow
@pytest.mark.parametrize("start_image", [False, True], ids=["text", "start_image"])
def test_the_example_workflow_runs_as_saved_and_from_a_start_image(env, start_image):
    """sdvg_core_ar_sampler as the frontend queues it (the text encoder swapped for saved embeddings, a small size),
    and with its start-image group switched on and wired as its note says: the video decodes, the report shows."""
    import workflow_tools as wt

    pack, classes, _ = env
    specs = wt.object_info_from_classes(classes.values())
    wf = wt.load(AR_WORKFLOW)
    api = wt.swap_text_encoder(wt.to_api(wt.unmuted(wf) if start_image else wf, specs), EMB_FILE)
    assert "ARVideoI2V" not in {n["class_type"] for n in wt.swap_text_encoder(wt.to_api(wf, specs), EMB_FILE).values()}
    if start_image:
        api = wt.set_inputs(wt.ar_start_image(api), "ARVideoI2V", **SIZE, length=25)  # the start + 2 blocks
    else:
        api = wt.set_inputs(api, "EmptyARVideoLatent", **SIZE, length=33)  # 3 blocks
    api = wt.set_inputs(api, "SDVGSamplerARVideo", tau=-5.0)
    pack.nodes.shared_memo.MEMO.clear()
    ex = MiniExecutor(classes)
    ex.run(api)
    by_type = {v["class_type"]: k for k, v in api.items()}
    frames = ex.values[by_type["VAEDecode"]][0]
    assert frames.shape == (25 if start_image else 33, SIZE["height"], SIZE["width"], 3)
    report = json.loads(ex.values[by_type["SDVGARReport"]][2])
    assert [b["decision"] for b in report["blocks"]] == ["forced"] + ["accepted"] * (1 if start_image else 2)
    shown = ex.ui[by_type["PreviewAny"]]
    assert "report: output/sdvg_ar/" in str(shown) and "forced" in str(shown)
