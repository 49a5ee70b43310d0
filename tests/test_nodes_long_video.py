"""Long-video node features against the fake host (tests/fake_comfy), on tiny models:

- a recipe per model reaches the engine and ComfyUI's memory reservation (SDVG Start / Generate);
- the drafter loader's kinds, pt entry and LoRA (merged at load; the LoRA is part of the memo key), and a ComfyUI
  MODEL carrying LoRA patches from ComfyUI's own loader as drafter;
- prompt schedules (SDVG Prompt Schedule, SDVG Prompt From Block) reach the generation spec of Generate and of the
  step-by-step loop, with clear errors before any work;
- save_video writes the video block by block as the blocks are commit (Generate) or from the final state (Finish),
  into the output folder with a counter, and 'frames' is a bounded preview.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fake_host
import node_env as ne
import workflow_tools as wt
from mini_executor import MiniExecutor

REPO = Path(__file__).resolve().parents[1]
W, H = 64, 48


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_long")
    with fake_host.installed(base) as pack:
        ne.write_tiny_models(base, pack.sdvg_core)
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
        yield pack, classes, base


def core(pack, name: str):
    return __import__(pack.sdvg_core.__name__ + "." + name, fromlist=["x"])


@pytest.fixture(scope="module")
def models(env):
    """Loaded once: target, Self-Forcing drafter, ImageReward, VAE and the test prompt's conditioning."""
    pack, _, _ = env
    n = pack.nodes
    target = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto").args[0]
    drafter = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt").args[0]
    reward = n.SDVGLoadImageReward.execute("ImageReward.pt", "auto", 16).args[0]
    vae = pack.core_nodes.VAELoader.execute("wan_2.1_vae.safetensors").args[0]
    cond, _ = n.SDVGLoadPromptEmbeddings.execute(ne.EMB_FILE).args
    return {"target": target, "drafter": drafter, "image_reward": reward, "vae": vae, "positive": cond}


def full_out_video(pack, models) -> str:
    return generate(pack, models, num_blocks=1)[2].args[4]


def generate(pack, models, **kw):
    """SDVG Generate at the test size; returns (frames, report dict, node output)."""
    args = dict(models, prompt="", width=W, height=H, num_blocks=3, seed=3, policy="sdvg", tau=-5.0,
                force_reject_first=True, recipe="krea", decode_rule="standard", cache_gb=1.0)
    args.update(kw)
    out = pack.nodes.SDVGGenerate.execute(**args)
    return out.args[0], json.loads(out.args[3]), out


# ------------------------------------------------------------------------------------------------ recipes per role
def test_recipe_per_role_reaches_engine_reservation_and_report(env, models):
    pack, _, _ = env
    n = pack.nodes
    recipes, memory = core(pack, "engine.recipes"), core(pack, "engine.memory")
    base = dict(models, prompt="", width=W, height=H, num_blocks=8, seed=1, decode_rule="standard", cache_gb=1.0)
    default = n.SDVGStart.execute(**base, recipe="krea").args[0]
    assert {r: default.session.config.recipe_for(r).name for r in ("drafter", "target")} == \
        {"drafter": "krea", "target": "krea"}  # the published pairing stays the default
    run = n.SDVGStart.execute(**base, recipe="krea", drafter_recipe="longlive", target_recipe="auto").args[0]
    config = run.session.config
    assert (config.recipe_for("drafter").name, config.recipe_for("target").name) == ("longlive", "krea")
    engine = run.session.engine()
    assert engine.recipes["drafter"].name == "longlive" and engine.recipes["target"].name == "krea"
    # ComfyUI's reservation: each DiT sized for its own recipe (a LongLive window is not Krea's rebuild)
    spec = run.state.spec
    vae = run.session.vae.inner
    dits = [(h.dit.cfg, h.dit.dtype) for h in (run.session.target, run.session.drafter)]
    own = memory.estimate_for_spec(spec, [recipes.recipe_by_name("krea"), recipes.recipe_by_name("longlive")], dits,
                                   vae.config, vae.dtype)
    krea = memory.estimate_for_spec(spec, recipes.recipe_by_name("krea"), dits, vae.config, vae.dtype)
    assert own.dits[1].step != krea.dits[1].step  # the test can tell the two apart
    assert run.session.drafter.dit.work_bytes == own.dits[1].step
    assert run.session.target.dit.work_bytes == own.dits[0].step
    assert "drafter longlive, target krea" in n.SDVGStart.execute(**base, recipe="krea",
                                                                 drafter_recipe="longlive").ui.value
    with pytest.raises(n.surface.SDVGError, match="drafter_recipe must be one of"):
        n.SDVGStart.execute(**base, recipe="krea", drafter_recipe="nope")


@pytest.mark.slow
def test_generate_runs_each_models_recipe(env, models):
    """The drafter's recipe changes the drafts (not the target's forced block 0); the report names both recipes;
    the node's result equals the core engine's with the same per-role config."""
    pack, _, _ = env
    pack.nodes.shared_memo.MEMO.clear()
    both, rep_both, _ = generate(pack, models)
    mixed, rep_mixed, _ = generate(pack, models, drafter_recipe="self_forcing")
    assert rep_both["recipe"] == "krea" and rep_mixed["recipe"] == "drafter self_forcing / target krea"
    block0 = 1 + 4 * (3 - 1)  # pixel frames of block 0 (3 latent frames)
    assert torch.equal(both[:block0], mixed[:block0])  # block 0: the target's, with the same (krea) recipe
    assert not torch.equal(both, mixed)  # the accepted drafts differ
    eng = core(pack, "engine.engine")
    policy = core(pack, "engine.policy")
    st = core(pack, "engine.state")
    recipes = core(pack, "engine.recipes")
    cfg = eng.EngineConfig(recipe=recipes.recipe_by_name("krea"), drafter_recipe=recipes.recipe_by_name("self_forcing"))
    text = pack.nodes.session.conditioning_embeddings(models["positive"])
    m = models
    engine = eng.Engine(m["target"].dit, pack.nodes.hosted.host_vae(m["vae"]), m["drafter"].dit,
                        m["image_reward"], cfg)
    emb = core(pack, "io.text").fit_text_len(text[0], m["target"].dit.cfg.text_len)
    spec = st.GenerationSpec(st.PromptConditioning.make(text[1], emb), W, H, 3, 3)
    state = engine.generate(spec, policy.ThresholdPolicy(tau=-5.0, aggregation="min", force_reject_first=True))
    assert state.lineage == rep_mixed["meta"]["lineage"]


# ------------------------------------------------------------------------------------------------ drafter kinds, LoRA
def _lora_file(pack, base: Path, name: str, rank: int = 4, seed: int = 11, comfy_format: bool = False) -> dict:
    """A rank-`rank` LoRA for the tiny drafter in models/loras: peft's format, or ComfyUI's generic one
    (diffusion_model.<module>.lora_A/B.weight) holding the same tensors."""
    from safetensors.torch import save_file

    wan, cfgm, lora = core(pack, "models.wan"), core(pack, "models.wan_config"), core(pack, "io.lora")
    sd = ne.peft_lora(wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=0), lora, rank, seed, scale=0.2)
    if comfy_format:
        sd = {"diffusion_model." + k[len(lora.PEFT_PREFIX):]: v for k, v in sd.items()}
    save_file({k: v.contiguous() for k, v in sd.items()}, str(base / "models" / "loras" / name))
    return sd


@pytest.mark.slow
def test_drafter_kind_entry_lora_and_key(env):
    pack, _, base = env
    n = pack.nodes
    _lora_file(pack, base, "tiny_lora.safetensors")
    plain = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt").args[0]
    lora = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", lora_name="tiny_lora.safetensors").args[0]
    lora2 = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", lora_name="tiny_lora.safetensors", lora_alpha=8.0).args[0]
    again = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", lora_name="tiny_lora.safetensors").args[0]
    # a LoRA-merged drafter never shares memo entries with the plain one (nor one merged at another alpha)
    assert len({plain.key, lora.key, lora2.key}) == 3 and again.key == lora.key
    assert "LoRA tiny_lora.safetensors merged" in lora.info and "kind self_forcing" in lora.info
    q = lambda h: h.dit.net.blocks[0].self_attn.q.weight  # noqa: E731
    assert not torch.equal(q(plain), q(lora)) and not torch.equal(q(lora), q(lora2))
    # the same as the core's loader (one merge, entry generator_ema for kind self_forcing)
    drafters = core(pack, "io.drafters")
    import folder_paths

    ref, _, rep = drafters.load_drafter(folder_paths.get_full_path("diffusion_models", "self_forcing_dmd.pt"),
                                        "self_forcing", folder_paths.get_full_path("loras", "tiny_lora.safetensors"))
    assert torch.equal(q(lora), ref.blocks[0].self_attn.q.weight) and rep.entry == "generator_ema"
    assert lora.own_recipe is None  # Self-Forcing family: SDVG Start's recipe
    # causal_forcing reads `generator` by default (the test file holds both entries)
    cf = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", kind="causal_forcing").args[0]
    assert "entry 'generator'" in cf.info and cf.key != plain.key
    # LongLive: base + its rank-256 LoRA, LongLive's recipe by default
    ll = n.SDVGLoadDrafter.execute(ne.LONGLIVE_BASE, kind="longlive", lora_name=ne.LONGLIVE_LORA).args[0]
    assert ll.own_recipe == "longlive" and "rank 256" in ll.info
    run = n.SDVGStart.execute(target=n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema",
                                                              "auto").args[0],
                              vae=pack.core_nodes.VAELoader.execute("wan_2.1_vae.safetensors").args[0],
                              positive=n.SDVGLoadPromptEmbeddings.execute(ne.EMB_FILE).args[0], width=W, height=H,
                              num_blocks=2, drafter=ll).args[0]
    assert run.session.config.recipe_for("drafter").name == "longlive"
    assert run.session.config.recipe_for("target").name == "krea"


def test_drafter_loader_validates_before_work(env):
    """validate_inputs (ComfyUI runs it at /prompt): the pack's messages for a kind / file / LoRA that cannot run."""
    pack, _, base = env
    n = pack.nodes
    v = n.SDVGLoadDrafter.validate_inputs
    assert v("self_forcing_dmd.pt", "self_forcing", "none") is True
    assert v(ne.LONGLIVE_BASE, "longlive", ne.LONGLIVE_LORA) is True
    msg = v(ne.LONGLIVE_BASE, "longlive", "none")
    assert isinstance(msg, str) and "needs its LoRA" in msg and "LongLive-1.3B" in msg
    msg = v("missing.pt", "longlive", ne.LONGLIVE_LORA)
    assert "missing.pt" in msg and "models/diffusion_models" in msg and "Efficient-Large-Model/LongLive-1.3B" in msg
    msg = v("self_forcing_dmd.pt", "self_forcing", "gone.safetensors")
    assert "gone.safetensors" in msg and "models/loras" in msg
    framewise = base / "models" / "diffusion_models" / "framewise"
    framewise.mkdir(exist_ok=True)
    (framewise / "causal_forcing.pt").write_bytes((base / "models" / "diffusion_models" / "self_forcing_dmd.pt").read_bytes())
    msg = v("framewise/causal_forcing.pt", "causal_forcing", "none")
    assert isinstance(msg, str) and "frame-wise" in msg and "chunkwise/causal_forcing.pt" in msg
    # a connected MODEL replaces the file; a LoRA file beside it would be silently unused: refused
    assert v("missing.pt", "self_forcing", "none", input_types={"model": "MODEL"}) is True
    msg = v("missing.pt", "self_forcing", ne.LONGLIVE_LORA, input_types={"model": "MODEL"})
    assert isinstance(msg, str) and "LoraLoaderModelOnly" in msg
    # a LoRA that does not fit the kind (LongLive's is rank 256) is refused by the loader with the reason
    _lora_file(pack, base, "wrong_rank.safetensors")
    with pytest.raises(n.surface.SDVGError, match="rank 4, but this drafter's LoRA has rank 256"):
        n.SDVGLoadDrafter.execute(ne.LONGLIVE_BASE, kind="longlive", lora_name="wrong_rank.safetensors")


@pytest.mark.slow
def test_comfy_lora_patched_model_as_drafter(env, models):
    """A MODEL from Load Diffusion Model -> LoraLoaderModelOnly keeps working as the drafter: ComfyUI writes the LoRA
    into the weights when it loads the model for SDVG's call, so the drafts equal those of the pack's own loader with
    the same LoRA merged, and differ from the plain MODEL's (whose memo entries they never reuse)."""
    pack, _, base = env
    n, cn = pack.nodes, pack.core_nodes
    from safetensors.torch import save_file

    wan, cfgm = core(pack, "models.wan"), core(pack, "models.wan_config")
    ema = torch.load(base / "models" / "diffusion_models" / "self_forcing_dmd.pt", weights_only=True)["generator_ema"]
    save_file({k: v.contiguous() for k, v in ema.items()}, str(base / "models" / "diffusion_models" / "tiny_drafter.safetensors"))
    _lora_file(pack, base, "tiny_lora_peft.safetensors", seed=21)
    _lora_file(pack, base, "tiny_lora_comfy.safetensors", seed=21, comfy_format=True)
    unet = cn.UNETLoader.execute("tiny_drafter.safetensors", "default").args[0]
    patched = cn.LoraLoaderModelOnly.execute(unet, "tiny_lora_comfy.safetensors", 1.0).args[0]
    assert patched.patches and patched.patches_uuid != unet.patches_uuid
    pack.nodes.shared_memo.MEMO.clear()
    kw = dict(policy="draft_only", num_blocks=2, seed=5)
    plain_d = n.SDVGLoadDrafter.execute("missing.pt", model=unet).args[0]
    lora_d = n.SDVGLoadDrafter.execute("missing.pt", model=patched).args[0]
    assert plain_d.key != lora_d.key
    by_plain, _, _ = generate(pack, {**models, "drafter": plain_d}, **kw)
    by_patch, rep, _ = generate(pack, {**models, "drafter": lora_d}, **kw)  # shared memo: the plain run's is there
    merged = n.SDVGLoadDrafter.execute("tiny_drafter.safetensors", lora_name="tiny_lora_peft.safetensors").args[0]
    by_merge, _, _ = generate(pack, {**models, "drafter": merged}, **kw)
    assert rep["blocks"][1]["producer"] == "drafter" and rep["blocks"][1]["work"]["drafter_forwards"] > 0
    assert not torch.equal(by_patch, by_plain)
    torch.testing.assert_close(by_patch, by_merge, atol=1e-5, rtol=0)
    assert "ComfyUI MODEL" in rep["meta"]["drafter"]


# ------------------------------------------------------------------------------------------------ prompt schedules
class FakeCLIP:
    """What CLIP Text Encode calls on ComfyUI's CLIP: tokenize + encode_from_tokens_scheduled (counted)."""

    def __init__(self, pack):
        self.text, self.calls = core(pack, "io.text"), []

    def tokenize(self, text: str):
        return {"text": text}

    def encode_from_tokens_scheduled(self, tokens):
        self.calls.append(tokens["text"])
        return [[self.text.demo_embeddings(tokens["text"], 32), {"pooled_output": None}]]


SCHEDULE = "0: a corgi runs in a meadow\n2: the corgi jumps over a log\n# a comment\n3: a corgi runs in a meadow"


def test_prompt_schedule_node_encodes_each_prompt_once(env):
    pack, _, _ = env
    n = pack.nodes
    clip = FakeCLIP(pack)
    sched = n.SDVGPromptSchedule.execute(SCHEDULE, clip).args[0]
    assert [(b, p.text) for b, p in sched] == [(0, "a corgi runs in a meadow"),
                                                             (2, "the corgi jumps over a log"),
                                                    (3, "a corgi runs in a meadow")]
    assert sorted(clip.calls) == ["a corgi runs in a meadow", "the corgi jumps over a log"]  # once per prompt
    assert torch.equal(sched[0].prompt.embeddings, sched[2].prompt.embeddings)
    # a re-queue after editing one line encodes that line only
    n.SDVGPromptSchedule.execute(SCHEDULE.replace("jumps over", "sniffs"), clip)
    assert clip.calls[2:] == ["the corgi sniffs a log"]
    # JSON entries may name a saved embeddings file (no text encoder needed for them)
    js = json.dumps([{"block": 0, "prompt": "first", "embeddings": ne.EMB_FILE}, {"block": 1, "prompt": "second"}])
    s2 = n.SDVGPromptSchedule.execute(js, clip).args[0]
    saved = core(pack, "io.text").load_embeddings(Path(n.folders.full_path("sdvg_prompts", ne.EMB_FILE)))[1]
    assert torch.equal(s2[0].prompt.embeddings, saved) and clip.calls[-1] == "second"


@pytest.mark.parametrize("text,words", [
    ("2: starts late\n4: more", "start at block 0"),
    ("0: a\n3: b\n3: c", "must increase"),
    ("0: a\n5:", "prompt is empty"),
    ("0: a\nfive: b", "expected `block: prompt`"),
    ("", "empty"),
], ids=["not-at-0", "not-increasing", "empty-prompt", "bad-line", "empty"])
def test_prompt_schedule_refused_at_prompt(env, text, words):
    pack, _, _ = env
    msg = pack.nodes.SDVGPromptSchedule.validate_inputs(text, input_types={"clip": "CLIP"})
    assert isinstance(msg, str) and words in msg and "`block: prompt`" in msg, msg


def test_prompt_schedule_needs_an_encoder_or_files(env):
    pack, _, _ = env
    v = pack.nodes.SDVGPromptSchedule.validate_inputs
    msg = v("0: a fox", input_types={})
    assert isinstance(msg, str) and "connect Load CLIP" in msg
    ok = json.dumps([{"block": 0, "prompt": "a", "embeddings": ne.EMB_FILE}])
    assert v(ok, input_types={}) is True
    msg = v(json.dumps([{"block": 0, "prompt": "a", "embeddings": "gone.safetensors"}]), input_types={})
    assert isinstance(msg, str) and "gone.safetensors" in msg and "models/sdvg_prompts" in msg
    fb = pack.nodes.SDVGPromptFromBlock.validate_inputs
    assert fb(0) is True and fb(4, input_types={"schedule": "SDVG_SCHEDULE"}) is True
    assert "which prompt would blocks 0..3 have" in fb(4, input_types={})


@pytest.mark.slow
def test_schedule_reaches_the_spec_of_generate_and_the_loop(env, models):
    """Generate with a schedule: each block under its own prompt (report prompts and each block's index); the loop
    with the same schedule at Start (the state carries it) commits the same video; the two schedule nodes agree."""
    pack, classes, _ = env
    n = pack.nodes
    pack.nodes.shared_memo.MEMO.clear()
    m = {k: v for k, v in models.items() if k != "positive"}
    sched = n.SDVGPromptSchedule.execute(SCHEDULE, FakeCLIP(pack)).args[0]
    frames, rep, _ = generate(pack, m, schedule=sched, num_blocks=4)
    assert [p["first_block"] for p in rep["prompts"]] == [0, 2, 3]
    assert [p["text"] for p in rep["prompts"]][1] == "the corgi jumps over a log"
    assert [b["prompt"] for b in rep["blocks"]] == [0, 0, 1, 2]
    # the same three prompts chained with SDVG Prompt From Block: the same spec, the same video
    text = core(pack, "io.text")
    chain = None
    for first, p in sched:
        cond = [[text.demo_embeddings(p.text, 32), {"pooled_output": None}]]
        chain = n.SDVGPromptFromBlock.execute(cond, p.text, first, chain).args[0]
    f2, rep2, _ = generate(pack, m, schedule=chain, num_blocks=4)
    assert rep2["meta"]["lineage"] == rep["meta"]["lineage"] and torch.equal(f2, frames)
    # the step-by-step loop: Start takes the schedule; Loop Start and Route show each block's prompt
    start = n.SDVGStart.execute(**m, width=W, height=H, num_blocks=4, seed=3, recipe="krea", decode_rule="standard",
                                cache_gb=1.0, schedule=sched)
    assert "prompts: block 0:" in start.ui.value
    s = start.args[0]
    texts = []
    while not s.state.done:
        texts.append(n.SDVGLoopStart.execute(s).ui.value)
        s, _ = n.SDVGRoute.execute(s, -5.0, True).args
    assert "prompt 1: 'the corgi jumps over a log'" in texts[2] and "prompt 0:" in texts[1]
    assert s.state.lineage == rep["meta"]["lineage"]
    assert [(b, p.text) for b, p in s.state.spec.schedule] == [(b, p.text) for b, p in sched]


def test_schedule_errors_before_any_work(env, models):
    pack, _, _ = env
    n = pack.nodes
    import comfy.model_management as mm

    sched = n.SDVGPromptSchedule.execute("0: a\n5: b", FakeCLIP(pack)).args[0]
    m = {k: v for k, v in models.items() if k != "positive"}
    mm.LOAD_CALLS.clear()
    with pytest.raises(n.surface.SDVGError, match="past the end of the video"):
        generate(pack, m, schedule=sched, num_blocks=4)
    with pytest.raises(n.surface.SDVGError, match="both 'positive' and 'schedule'"):
        generate(pack, models, schedule=sched, num_blocks=8)
    with pytest.raises(n.surface.SDVGError, match="clear 'prompt'"):
        generate(pack, m, schedule=sched, num_blocks=8, prompt="another text")
    with pytest.raises(n.surface.SDVGError, match="connect 'positive'"):
        generate(pack, m, num_blocks=8)
    assert mm.LOAD_CALLS == []  # refused before any model was loaded for a call
    with pytest.raises(n.surface.SDVGError, match="must come after"):
        n.SDVGPromptFromBlock.execute(models["positive"], "", 0, sched)
    with pytest.raises(n.surface.SDVGError, match="prompt text is empty"):
        n.SDVGPromptFromBlock.execute([[torch.zeros(1, 4, 32), {}]], "", 0)


@pytest.mark.slow
def test_requeue_after_editing_the_second_prompt(env, models):
    """Editing the second prompt's text recomputes nothing before its first block (the memo keys hold each
    block's own prompt), through the schedule node and Generate's shared memo."""
    pack, _, _ = env
    pack.nodes.shared_memo.MEMO.clear()
    m = {k: v for k, v in models.items() if k != "positive"}
    clip = FakeCLIP(pack)
    first = pack.nodes.SDVGPromptSchedule.execute("0: a corgi runs\n2: a corgi sits", clip).args[0]
    edited = pack.nodes.SDVGPromptSchedule.execute("0: a corgi runs\n2: a corgi sleeps", clip).args[0]
    generate(pack, m, schedule=first, num_blocks=4)
    _, rep, _ = generate(pack, m, schedule=edited, num_blocks=4)
    work = [(b["work"].get("drafter_forwards", 0), b["work"].get("target_forwards", 0)) for b in rep["blocks"]]
    assert work[:2] == [(0, 0), (0, 0)] and sum(work[2]) > 0, work


# ------------------------------------------------------------------------------------------------ saving as blocks commit
def _decoded_frames(path: str) -> list:
    import av

    with av.open(path) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


@pytest.mark.slow
def test_generate_writes_each_block_as_it_commits(env, models, monkeypatch):
    """save_video: every block goes to the file right after its commit (never the whole video in memory: the
    engine's all-frames output is not called), 'frames' is an evenly spaced preview, the file lands in the output
    folder with a counter and shows on the node."""
    pack, _, base = env
    n = pack.nodes
    events = []
    route = pack.sdvg_core.engine.engine.Engine.route
    write = n.video_file.StreamingVideo.write

    def counting_route(self, state, policy):
        new = route(self, state, policy)
        events.append(("commit", len(new.blocks)))
        return new

    def counting_write(self, frames):
        events.append(("write", int(frames.shape[0])))
        return write(self, frames)

    def no_whole_video(self, state):
        raise AssertionError("the whole video was gathered in memory")

    monkeypatch.setattr(pack.sdvg_core.engine.engine.Engine, "route", counting_route)
    monkeypatch.setattr(n.video_file.StreamingVideo, "write", counting_write)
    monkeypatch.setattr(n.video_file, "PREVIEW_FRAMES", 8)
    pack.nodes.shared_memo.MEMO.clear()
    nb = 4
    with monkeypatch.context() as mp:
        mp.setattr(pack.sdvg_core.engine.engine.Engine, "frames", no_whole_video)
        preview, rep, out = generate(pack, models, num_blocks=nb, save_video=True, filename_prefix="video/long")
    # write k follows commit k and comes before commit k+1
    assert [e[0] for e in events] == ["commit", "write"] * nb, events
    total = 1 + 4 * (3 * nb - 1)
    assert sum(e[1] for e in events if e[0] == "write") == total
    assert out.args[4] == "video/long_00001_.mp4"
    shown = n.SDVGShowVideo.execute(out.args[4]).ui  # the node that plays it (Generate shows its block previews)
    assert shown == {"images": [{"filename": "long_00001_.mp4", "subfolder": "video", "type": "output"}],
                     "animated": (True,)}
    with pytest.raises(n.surface.SDVGError, match="not inside"):
        n.SDVGShowVideo.execute("../elsewhere.mp4")
    path = base / "output" / "video" / "long_00001_.mp4"
    frames_in_file = _decoded_frames(str(path))
    assert len(frames_in_file) == total and frames_in_file[0].shape == (H, W, 3)
    assert int(rep["meta"]["frames"]) == total and "written block by block" in out.args[1]
    # the preview: every stride-th frame of what a run without saving outputs, exactly
    events.clear()
    full, _, _ = generate(pack, models, num_blocks=nb)
    stride = -(-total // 8)
    assert preview.shape[0] <= 8 and torch.equal(preview, full[::stride])
    # the file holds that video (H.264 is lossy: compared to 8 bits, loosely)
    got = torch.from_numpy(frames_in_file[5]).float() / 255
    err, other = (got - full[5]).abs().mean().item(), (got - full[-1]).abs().mean().item()
    print(f"\nH.264 frame 5: mean |error| {err:.4f} vs {other:.4f} against another frame")
    assert err < 0.15 and err < other / 2
    _, _, again = generate(pack, models, num_blocks=nb, save_video=True, filename_prefix="video/long")
    assert again.args[4] == "video/long_00002_.mp4"  # a counter, as Save Video's
    assert full_out_video(pack, models) == ""  # save_video off: no file


@pytest.mark.slow
def test_finish_saves_the_loop_video_block_by_block(env, models, monkeypatch):
    pack, _, base = env
    n = pack.nodes
    s = n.SDVGStart.execute(**models, width=W, height=H, num_blocks=3, seed=2).args[0]
    while not s.state.done:
        s = n.SDVGRoute.execute(s, -5.0, True).args[0]
    monkeypatch.setattr(pack.sdvg_core.engine.engine.Engine, "frames",
                        lambda self, state: (_ for _ in ()).throw(AssertionError("whole video in memory")))
    out = n.SDVGFinish.execute(s, save_video=True, filename_prefix="loop/SDVG")
    path = base / "output" / out.args[4]
    assert len(_decoded_frames(str(path))) == 1 + 4 * (3 * 3 - 1) and out.args[0].shape[0] <= 32


def test_num_blocks_widget_allows_minutes_of_video(env):
    """A 2-minute video (160 blocks at 16 fps) must be enterable in Start's and Generate's num_blocks widget: the
    frontend and /prompt clamp to the widget's max (it was 128 before long videos)."""
    _, classes, _ = env
    two_minutes = -(-(2 * 60 * 16 + 3) // 12)  # pixel frames = 12 * blocks - 3
    for node_id in ("SDVGStart", "SDVGGenerate"):
        spec = next(i for i in classes[node_id].GET_SCHEMA().inputs if i.id == "num_blocks")
        assert spec.widget["max"] >= two_minutes == 161, (node_id, spec.widget)
