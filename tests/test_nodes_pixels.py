"""Pixels in through the nodes (docs/pixels.md): SDVG Start and SDVG Generate take a start image or an
input video (IMAGE frames) with its mode and strength, build sdvg_core's `PixelInput` from them and nothing more, and
give what the engine gives through its public API; the two example workflows (core Load Image / Load Video + Get Video
Components) run on tiny models against the fake host, their report saying the mode and the strength."""
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
W, H, BLOCKS = 64, 48, 3
IMAGE_HW = (48, 80)  # wider than the run: centre-cropped (a sixth of each side) and resized
VIDEO_FRAMES = 1 + 4 * (3 * BLOCKS - 1)  # exactly what 3 blocks of video-to-video read
START_IMAGE, INPUT_VIDEO = "sdvg_start.png", "sdvg_input.mp4"  # the names the workflows load (build_workflows.py)
PHONE_CLIP, PHONE_FPS, PHONE_FRAMES = "phone_30fps.mp4", 30, 60  # 2.0 s: 32 frames on the run's 16 fps clock


def _frames(n: int, hw: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """Smooth moving colour fields [n, H, W, 3] in 0..1 (a video codec keeps them close)."""
    y = torch.linspace(0, 1, hw[0])[:, None, None]
    x = torch.linspace(0, 1, hw[1])[None, :, None]
    c = torch.tensor([0.2, 0.5, 0.8])[None, None, :]
    return torch.stack([(0.5 + 0.4 * torch.sin(6 * x + 4 * y + c * (seed + 1) + 0.3 * t)) for t in range(n)])


def write_inputs(folder: Path) -> None:
    """A PNG start image and H.264 input videos (16 fps, and a 30 fps phone clip) in ComfyUI's input folder."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray((_frames(1, IMAGE_HW)[0] * 255).to(torch.uint8).numpy()).save(folder / START_IMAGE)
    _write_mp4(folder / INPUT_VIDEO, VIDEO_FRAMES, 16)
    _write_mp4(folder / PHONE_CLIP, PHONE_FRAMES, PHONE_FPS)


def _write_mp4(path: Path, frames: int, fps: int) -> None:
    import av

    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("h264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for f in _frames(frames, (H, W), seed=1):
            frame = av.VideoFrame.from_ndarray((f * 255).to(torch.uint8).numpy(), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_pixels")
    with fake_host.installed(base) as pack:
        ne.write_tiny_models(base, pack.sdvg_core)
        write_inputs(base / "input")
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
        models = ne.loaded_models(pack)
        yield pack, classes, models, base


def generate(pack, models, **kw):
    args = dict(models, prompt="", width=W, height=H, num_blocks=BLOCKS, seed=3, policy="sdvg", tau=-5.0,
                force_reject_first=True, recipe="krea", decode_rule="standard", cache_gb=1.0)
    out = pack.nodes.SDVGGenerate.execute(**{**args, **kw})
    return out.args[0], json.loads(out.args[3]), out.args[1]


def core_run(pack, models, pixels):
    """The same run through sdvg_core's public API (the node must add nothing)."""
    sd, n = pack.sdvg_core, pack.nodes
    emb, text = n.session.conditioning_embeddings(models["positive"])
    emb = __import__(sd.__name__ + ".io.text", fromlist=["x"]).fit_text_len(emb, models["target"].dit.cfg.text_len)
    engine = sd.Engine(models["target"].dit, n.hosted.host_vae(models["vae"]), models["drafter"].dit,
                       models["image_reward"], sd.EngineConfig())
    spec = sd.GenerationSpec(sd.PromptConditioning.make(text, emb), W, H, BLOCKS, 3, pixels=pixels)
    state = engine.generate(spec, sd.ThresholdPolicy(tau=-5.0))
    return state, engine


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["start_image", "extend", "video_to_video"])
def test_generate_is_the_cores_run_of_the_same_pixel_input(env, mode):
    pack, _, models, _ = env
    sd = pack.sdvg_core
    image, video = _frames(1, IMAGE_HW), _frames(VIDEO_FRAMES, (H, W), seed=1)
    kw = {"start_image": image} if mode == "start_image" else {"input_video": video, "video_mode": mode,
                                                                 "strength": 0.5}
    frames, rep, text = generate(pack, models, **kw)
    pixels = {"start_image": lambda: sd.PixelInput.start_image(image), "extend": lambda: sd.PixelInput.extend(video),
              "video_to_video": lambda: sd.PixelInput.video_to_video(video, 0.5)}[mode]()
    state, engine = core_run(pack, models, pixels)
    assert rep["meta"]["lineage"] == state.lineage and torch.equal(frames, engine.frames(state))
    assert rep["pixels"]["mode"] == mode and rep["pixels"]["digest"] == pixels.digest
    assert rep["pixels"]["strength"] == (0.5 if mode == "video_to_video" else 1.0)
    assert ("pixels in: video_to_video strength 0.5," if mode == "video_to_video" else f"pixels in: {mode},") in text
    assert int(rep["meta"]["frames"]) == frames.shape[0]
    generated = 1 + 4 * (3 * BLOCKS - 1)
    if mode != "video_to_video":  # the given frames, then the blocks (Krea leaves out block 0's first 3, as its server)
        assert frames.shape[0] == {"start_image": 1, "extend": VIDEO_FRAMES}[mode] + generated - 3
    else:
        assert frames.shape[0] == generated


def test_start_loop_and_finish_give_generates_video(env):
    """SDVG Start takes the same inputs: the step-by-step loop commits the same blocks and Finish outputs the same
    video (the given frames first) and names the mode."""
    pack, _, models, base = env
    n = pack.nodes
    video = _frames(VIDEO_FRAMES, (H, W), seed=1)
    frames, rep, _ = generate(pack, models, input_video=video, video_mode="extend")
    start = n.SDVGStart.execute(**models, width=W, height=H, num_blocks=BLOCKS, seed=3, input_video=video,
                                video_mode="extend")
    assert "pixels: extend (from video to extend (IMAGE tensor))" in start.ui.value
    s = start.args[0]
    while not s.state.done:
        s = n.SDVGRoute.execute(s, -5.0, True).args[0]
    out = n.SDVGFinish.execute(s)
    assert s.state.lineage == rep["meta"]["lineage"] and torch.equal(out.args[0], frames)
    assert "pixels in: extend," in out.args[1]
    saved = n.SDVGFinish.execute(s, save_video=True, filename_prefix="video/loop_extend")  # 'frames' is then a preview
    import av

    with av.open(str(base / "output" / saved.args[4])) as c:  # the given frames first, then the blocks
        assert sum(1 for _ in c.decode(video=0)) == frames.shape[0]


@pytest.mark.slow
def test_a_short_input_video_ends_the_run_and_says_so(env):
    pack, _, models, base = env
    video = _frames(VIDEO_FRAMES - 12, (H, W), seed=1)  # one block short
    frames, rep, text = generate(pack, models, input_video=video, strength=0.7, save_video=True,
                                 filename_prefix="video/short")
    assert len(rep["blocks"]) == BLOCKS - 1 and rep["stopped"] and "stopped early: the input video ends" in text
    import av

    with av.open(str(base / "output" / "video" / "short_00001_.mp4")) as c:  # every committed block, once each
        assert sum(1 for _ in c.decode(video=0)) == 1 + 4 * (3 * (BLOCKS - 1) - 1) == int(rep["meta"]["frames"])


def test_pixel_inputs_refused_before_any_work(env):
    pack, _, models, _ = env
    import comfy.model_management as mm

    err = pack.nodes.surface.SDVGError
    image, video = _frames(1, IMAGE_HW), _frames(VIDEO_FRAMES, (H, W))
    mm.LOAD_CALLS.clear()
    with pytest.raises(err, match="both 'start_image' and 'input_video' are connected"):
        generate(pack, models, start_image=image, input_video=video)
    with pytest.raises(err, match=r"SDVG Generate: .*strength"):  # sdvg_core's check, its message
        generate(pack, models, input_video=video, strength=1.5)
    with pytest.raises(err, match="SDVG Start: .*video_mode must be one of"):
        pack.nodes.SDVGStart.execute(**models, width=W, height=H, num_blocks=1, seed=0, input_video=video,
                                     video_mode="start_image")
    with pytest.raises(err, match="SDVG Generate: "):  # a 1:4 strip cropped to 4:3 would lose most of it
        generate(pack, models, start_image=_frames(1, (16, 64)))
    assert mm.LOAD_CALLS == []


# ------------------------------------------------------------------------------------------------ workflows
PIXEL_WORKFLOWS = {"sdvg_image_to_video.json": "start_image", "sdvg_video_to_video.json": "video_to_video"}


def api_of(classes: dict, name: str) -> dict:
    specs = wt.object_info_from_classes(classes.values())
    api = wt.swap_text_encoder(wt.to_api(wt.load(REPO / "workflows" / name), specs), ne.EMB_FILE)
    return wt.set_inputs(api, "SDVGGenerate", width=W, height=H, num_blocks=BLOCKS, tau=-5.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", PIXEL_WORKFLOWS)
def test_pixel_workflows_run_and_report_mode_and_strength(env, name):
    pack, classes, _, _ = env
    api = api_of(classes, name)
    ex = MiniExecutor(classes)
    ex.run(api)
    gen = ne.node_of(api, "SDVGGenerate")
    rep, text = json.loads(ex.values[gen][3]), ex.values[gen][1]
    mode = PIXEL_WORKFLOWS[name]
    assert rep["pixels"]["mode"] == mode and len(rep["blocks"]) == BLOCKS
    assert ("pixels in: video_to_video strength 0.7," if mode == "video_to_video" else "pixels in: start_image,") in text
    frames = ex.values[gen][0]
    assert frames.shape[1:] == (H, W, 3) and int(rep["meta"]["frames"]) == frames.shape[0]
    loader = {"start_image": "LoadImage", "video_to_video": "GetVideoComponents"}[mode]
    assert api[gen]["inputs"]["start_image" if mode == "start_image" else "input_video"][0] == ne.node_of(api, loader)


@pytest.mark.slow
def test_workflows_saved_before_the_pixel_inputs_still_load_and_run(env):
    """A workflow saved before SDVG Start / Generate had pixel inputs (no such sockets, no widget values): the
    frontend's conversion gives the defaults, and it runs as text-to-video."""
    pack, classes, _, _ = env
    specs = wt.object_info_from_classes(classes.values())
    wf = wt.load(REPO / "workflows" / "sdvg_generate.json")
    for node in wf["nodes"]:
        if node["type"] in ("SDVGGenerate", "SDVGStart"):
            node["inputs"] = [i for i in node["inputs"] if i["name"] not in ("start_image", "input_video", "video_mode",
                                                                              "strength", "fps")]
            node["widgets_values"] = node["widgets_values"][:-2]
            slots = {i["link"]: k for k, i in enumerate(node["inputs"]) if i["link"] is not None}
            for link in wf["links"]:  # the links into it name the slots as they were then
                if link[3] == node["id"]:
                    link[4] = slots[link[0]]
    assert wt.validate(wf, specs, host_newer=True) == []
    api = wt.swap_text_encoder(wt.to_api(wf, specs), ne.EMB_FILE)
    gen = ne.node_of(api, "SDVGGenerate")
    assert api[gen]["inputs"]["video_mode"] == "video_to_video" and api[gen]["inputs"]["strength"] == 0.7
    api = wt.set_inputs(api, "SDVGGenerate", width=W, height=H, num_blocks=2, tau=-5.0)
    ex = MiniExecutor(classes)
    ex.run(api)
    assert json.loads(ex.values[gen][3])["pixels"] is None


@pytest.mark.slow
def test_input_video_frames_at_their_own_fps_keep_the_videos_duration(env):
    """core Load Video + Get Video Components hand the frames at the file's rate and the rate on `fps`: the workflow
    connects it, so a 30 fps clip (60 frames, 2.0 s) is read on the 16 fps clock (32 frames: blocks of 9 + 12, a third
    would need 33); the node's tensor path does the same with `fps` given, and without it takes the frames as they are."""
    pack, classes, models, _ = env
    api = wt.set_inputs(api_of(classes, "sdvg_video_to_video.json"), "LoadVideo", file=PHONE_CLIP)
    gen = ne.node_of(api, "SDVGGenerate")
    assert api[gen]["inputs"]["fps"][0] == ne.node_of(api, "GetVideoComponents")  # the workflow connects the rate
    ex = MiniExecutor(classes)
    ex.run(api)
    rep = json.loads(ex.values[gen][3])
    assert (rep["pixels"]["source_fps"], rep["pixels"]["frame_rate"], rep["pixels"]["given_frames"]) == (30.0, 16, 21)
    assert len(rep["blocks"]) == 2 and rep["stop_cause"] == "input_ended"
    assert "(input 30 fps, resampled to 16 fps by time)" in ex.values[gen][1]
    clip = _frames(PHONE_FRAMES, (H, W), seed=1)
    _, kept, _ = generate(pack, models, input_video=clip, num_blocks=2)  # no fps: one output frame per given frame
    assert kept["pixels"]["given_frames"] == 21 and kept["pixels"]["frame_rate"] is None
    _, timed, _ = generate(pack, models, input_video=clip, fps=float(PHONE_FPS), num_blocks=2)
    assert timed["pixels"]["frame_rate"] == 16 and timed["pixels"]["digest"] != kept["pixels"]["digest"]


@pytest.mark.parametrize("recipe", ["krea", "self_forcing", "longlive", "longlive_infinity"])
def test_target_only_video_to_video_counts_1x_with_the_plan_it_ran(env, recipe):
    """SDVG Generate's report counts the target-only baseline with the plan the engine ran (a strength's plan: fewer
    steps than text-to-video), so target-only video-to-video is 1.00x for every recipe, and the progress bar's total
    is that plan's calls."""
    import comfy.utils

    pack, _, models, _ = env
    video = _frames(VIDEO_FRAMES, (H, W), seed=1)
    comfy.utils.PROGRESS.clear()
    _, rep, text = generate(pack, {k: v for k, v in models.items() if k not in ("drafter", "image_reward")},
                            policy="target_only", recipe=recipe, input_video=video, strength=0.5)
    assert rep["counted_speedup"] == pytest.approx(1.0) and "counted speedup 1.00x" in text, rep["counted_speedup"]
    sd = pack.sdvg_core
    steps = sd.recipe_by_name(recipe).strength_plan(0.5).num_steps  # Self-Forcing at 0.5: 2 calls, Krea: 5
    assert rep["target_forwards"] == sum(b["cost"]["target_forwards"] for b in rep["blocks"]) and \
        all(b["cost"]["target_forwards"] >= steps for b in rep["blocks"])
    assert {t for _, t, _, _ in comfy.utils.PROGRESS} == {BLOCKS * steps}  # the bar over the calls it makes


@pytest.mark.slow
def test_a_video_to_video_graph_saved_before_the_fps_input_still_validates_and_runs(env):
    """The sdvg_video_to_video graph as saved before SDVG Generate had `fps` (no such socket, no link): it validates
    against today's nodes (fps is a socket, so no widget value moves) and runs, its frames taken as they are."""
    pack, classes, _, _ = env
    specs = wt.object_info_from_classes(classes.values())
    wf = wt.load(REPO / "workflows" / "sdvg_video_to_video.json")
    (gen,) = [n for n in wf["nodes"] if n["type"] == "SDVGGenerate"]
    fps_link = next(i["link"] for i in gen["inputs"] if i["name"] == "fps")
    gen["inputs"] = [i for i in gen["inputs"] if i["name"] != "fps"]
    wf["links"] = [ln for ln in wf["links"] if ln[0] != fps_link]
    for node in wf["nodes"]:
        for out in node["outputs"]:
            out["links"] = [k for k in out.get("links") or [] if k != fps_link]
    for link in wf["links"]:  # the slots into SDVG Generate as they were then
        if link[3] == gen["id"]:
            link[4] = next(k for k, i in enumerate(gen["inputs"]) if i["link"] == link[0])
    assert wt.validate(wf, specs, host_newer=True) == []
    api = wt.set_inputs(wt.swap_text_encoder(wt.to_api(wf, specs), ne.EMB_FILE), "SDVGGenerate", width=W, height=H,
                        num_blocks=BLOCKS, tau=-5.0)
    node = ne.node_of(api, "SDVGGenerate")
    assert "fps" not in api[node]["inputs"]
    ex = MiniExecutor(classes)
    ex.run(api)
    px = json.loads(ex.values[node][3])["pixels"]
    assert px["mode"] == "video_to_video" and px["frame_rate"] is None and px["given_frames"] == VIDEO_FRAMES


@pytest.mark.slow
def test_generate_starts_a_run_once_and_a_fresh_run_leaves_the_shared_cache_as_it_found_it(env, monkeypatch):
    """SDVG Generate builds one engine and starts the run once with it: a start image is encoded once (at the start;
    Krea's anchors are encoded later, during blocks), and with fresh_run into the run's own memo only, so the cache
    every SDVG node shares holds afterwards exactly what it held."""
    pack, classes, models, _ = env
    from importlib import import_module

    engine_mod = import_module(pack.__name__ + ".sdvg_core.engine.engine")
    wan_vae = import_module(pack.__name__ + ".sdvg_core.models.vae").WanVAE
    shared = pack.nodes.shared_memo.MEMO
    from run_starts import count_starts

    counts = count_starts(monkeypatch, engine_mod.Engine, wan_vae)
    image = _frames(1, IMAGE_HW, seed=5)  # an image no other test encodes
    before = (len(shared), shared.kinds(), shared.bytes)
    frames, report, _ = generate(pack, models, start_image=image, fresh_run=True)
    assert counts == {"engines": 1, "starts": 1, "encodes_at_start": 1}, counts
    assert (len(shared), shared.kinds(), shared.bytes) == before
    assert report["pixels"]["mode"] == "start_image" and frames.shape[0] > 1
