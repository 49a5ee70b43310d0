"""Live runs in the core (sdvg_core/live): settings read once per block boundary, written into the timeline, and a
replay of that timeline that gives the same video bit for bit; Stop, the drafter switched off, a new prompt, a live
camera-like input with its drop rule, and the controls' checks of what a page may send."""
from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from sdvg_core import Engine, EngineConfig, GenerationSpec, PixelInput, PromptConditioning, TieredMemo, tiny_models
from sdvg_core.engine.policy import DEFAULT_TAU
from sdvg_core.io.text import demo_embeddings
from sdvg_core.live.controls import LiveControls, LiveRequestError, LiveSettings, parse_request
from sdvg_core.live.frames import FrameBuffer, LiveSource, decode_frame, live_digest, open_recording
from sdvg_core.live.session import USER_STOP, USER_STOPPED, LiveRun, PromptBook, replay_settings
from sdvg_core.live.timeline import Timeline

W, H, BLOCKS = 48, 32, 6
PROMPTS = ("a red fox in the snow", "the fox runs into a pine forest", "a lake at dawn")
TEXT_DIM = 32  # the tiny DiTs' text width


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def encode(text: str) -> torch.Tensor:
    return demo_embeddings(text, TEXT_DIM)


def cond(text: str) -> PromptConditioning:
    return PromptConditioning.make(text, encode(text))


def engine_of(m, memo=None) -> Engine:
    return Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig.for_run("krea"), memo=memo if memo is not None else TieredMemo(1 << 30))


def spec_of(blocks: int = BLOCKS, pixels=None) -> GenerationSpec:
    return GenerationSpec(cond(PROMPTS[0]), W, H, blocks, 7, pixels=pixels)


def live_run(m, changes: dict, blocks: int = BLOCKS, memo=None, **kw):
    """A live run whose controls a 'viewer' changes after block b commits (`changes[b]`, a request): read at the
    next boundary, as a page's request would be."""
    controls = LiveControls(LiveSettings(tau=-0.8, prompt=PROMPTS[0]), prepared=PROMPTS[:2])
    engine = engine_of(m, memo)
    run = LiveRun(engine, lambda b: controls.take(), PromptBook(encode, [cond(p) for p in PROMPTS[:2]]), **kw)

    def on_block(eng, state):
        request = changes.get(len(state.blocks) - 1)
        if request is not None:
            controls.apply(request)

    final = run.run(engine.start(spec_of(blocks)), on_block)
    return final, run.timeline, engine


def replayed(m, timeline: Timeline, blocks: int = BLOCKS, memo=None, source=None):
    engine = engine_of(m, memo)
    run = LiveRun(engine, replay_settings(timeline), PromptBook(encode), base_policy=timeline.base_policy,
                  source=source)
    spec = spec_of(blocks)
    if source is not None:
        spec = dataclasses.replace(spec, pixels=PixelInput("video_to_video", source, timeline.blocks[0].strength))
    return run.run(engine.start(spec)), engine


CHANGES = {1: {"tau": -5.0}, 2: {"prompt_index": 1}, 3: {"drafter": False}, 4: {"drafter": True, "tau": 5.0,
                                                                                  "prompt": PROMPTS[2]}}


@pytest.mark.slow
def test_settings_changed_mid_run_are_read_at_the_next_boundary_and_recorded(models):
    final, tl, _ = live_run(models, CHANGES)
    assert len(final.blocks) == BLOCKS and final.stopped is None
    got = [(b.policy, b.tau, tl.prompts[b.prompt]) for b in tl.blocks]
    assert got == [("sdvg:tau=-0.8", -0.8, PROMPTS[0]), ("sdvg:tau=-0.8", -0.8, PROMPTS[0]),
                   ("sdvg:tau=-5", -5.0, PROMPTS[0]), ("sdvg:tau=-5", -5.0, PROMPTS[1]),
                   ("target-only", None, PROMPTS[1]), ("sdvg:tau=5", 5.0, PROMPTS[2])]
    decisions = [b.decision for b in final.blocks]
    assert decisions[0] == "forced" and decisions[2:4] == ["accepted", "accepted"]  # tau -5 keeps every draft
    assert decisions[4] == "forced" and final.blocks[4].producer == "target"  # the drafter is off: no draft at all
    assert decisions[5] == "rejected"  # tau +5 rejects the tiny scorer's drafts
    assert [final.spec.prompt_at(b).text for b in range(BLOCKS)] == [tl.prompts[s.prompt] for s in tl.blocks]
    assert [s.settings_version for s in tl.blocks] == [0, 0, 1, 2, 3, 4]


@pytest.mark.slow
def test_a_replay_of_the_timeline_makes_the_same_video_bit_for_bit(models):
    final, tl, engine = live_run(models, CHANGES)
    again = Timeline.from_dict(tl.to_dict())  # through the report's JSON, as a replay reads it
    replay, engine2 = replayed(models, again)
    assert replay.lineage == final.lineage  # the hash chain over every committed block's latent bytes
    assert [b.decision for b in replay.blocks] == [b.decision for b in final.blocks]
    assert torch.equal(engine2.frames(replay), engine.frames(final))


@pytest.mark.slow
def test_a_replay_on_another_schedule_differs(models):
    """The replay's equality is the schedule's doing: the same run with one tau change left out differs."""
    final, tl, _ = live_run(models, CHANGES)
    edited = Timeline.from_dict(tl.to_dict())
    edited.blocks[5] = dataclasses.replace(edited.blocks[5], policy="sdvg:tau=-5", tau=-5.0)
    replay, _ = replayed(models, edited)
    assert replay.blocks[5].decision == "accepted" and replay.lineage != final.lineage


@pytest.mark.slow
def test_stop_ends_the_run_after_the_block_in_progress(models):
    final, tl, engine = live_run(models, {2: {"stop": True}})
    assert len(final.blocks) == 3 and final.stopped == USER_STOPPED and final.stop_cause == USER_STOP
    assert tl.stopped_by_user and len(tl.blocks) == 3
    from sdvg_core import build_report

    report = build_report(final, "live", engine.recipe, engine.recipe.plan.num_steps, live=tl.to_dict())
    assert report.stopped == USER_STOPPED and report.live["stopped_by_user"] and report.num_blocks == 3


def test_a_prompt_nobody_prepared_needs_an_encoder_and_a_recipe_that_switches(models):
    book = PromptBook(None, [cond(PROMPTS[0])])
    with pytest.raises(ValueError, match="was not prepared and this run has no text encoder"):
        book.get("something new")
    controls = LiveControls(LiveSettings(tau=-0.7, prompt=PROMPTS[0]), can_switch_prompts=False)
    with pytest.raises(LiveRequestError) as e:
        controls.apply({"prompt": "another"})
    assert e.value.status == 409 and "cannot change the prompt" in str(e.value)
    assert controls.apply({"prompt": PROMPTS[0]}).prompt == PROMPTS[0]  # the prompt in force is fine


def test_a_prompt_nobody_prepared_is_refused_by_the_controls_of_a_run_without_an_encoder():
    """Refused when the page asks (409), not at the next boundary, where the prompt book would end the run."""
    controls = LiveControls(LiveSettings(tau=-0.7, prompt=PROMPTS[0]), prepared=PROMPTS[:2], encodes_prompts=False)
    with pytest.raises(LiveRequestError) as e:
        controls.apply({"prompt": "something new"})
    assert e.value.status == 409 and "no text encoder" in str(e.value) and controls.take().version == 0
    assert controls.apply({"prompt": PROMPTS[1]}).prompt == PROMPTS[1]  # a prepared one, typed: fine
    assert controls.apply({"prompt_index": 0}).prompt == PROMPTS[0]
    assert LiveControls(LiveSettings(tau=0.0, prompt=PROMPTS[0])).apply({"prompt": "new"}).prompt == "new"


@pytest.mark.parametrize("request_, status, words", [
    ({"tau": float("nan")}, 400, "finite"), ({"tau": "0.5"}, 400, "must be a number"), ({"tau": True}, 400, "number"),
    ({"drafter": "yes"}, 400, "true or false"), ({"prompt": ""}, 400, "non-empty"), ({"prompt": "x" * 5000}, 413, "at most"),
    ({"prompt_index": 7}, 400, "prompt_index must be 0..1"), ({"stop": False}, 400, "stop takes true"),
    ({"volume": 3}, 400, "unknown control"), ({}, 400, "empty request"), ({"strength": 0.5}, 409, "no input video"),
    ({"prompt": "a", "prompt_index": 0}, 400, "not both"),
])
def test_controls_refuse_what_a_page_must_not_send(request_, status, words):
    controls = LiveControls(LiveSettings(tau=-0.7, prompt=PROMPTS[0]), prepared=PROMPTS[:2])
    before = controls.take()
    with pytest.raises(LiveRequestError) as e:
        controls.apply(request_)
    assert e.value.status == status and words in str(e.value)
    assert controls.take() == before  # nothing half-applied


def test_request_bodies_are_parsed_with_limits():
    assert parse_request(b'{"tau": -1}') == {"tau": -1}
    for body, status in ((b"not json", 400), (b"[1, 2]", 400), (b'{"tau": NaN}', 400), (b"x" * 70000, 413),
                         (b"\xff\xfe", 400)):
        with pytest.raises(LiveRequestError) as e:
            parse_request(body)
        assert e.value.status == status, body


def test_controls_are_safe_from_many_threads():
    controls = LiveControls(LiveSettings(tau=0.0, prompt=PROMPTS[0]))
    threads = [threading.Thread(target=lambda i=i: [controls.apply({"tau": float(i)}) for _ in range(200)])
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert controls.take().version == 1600 and controls.take().tau in {float(i) for i in range(8)}


# ----------------------------------------------------------------------------------------------- a live input
def _frame(i: int) -> torch.Tensor:
    y = torch.linspace(0, 1, H)[:, None, None]
    x = torch.linspace(0, 1, W)[None, :, None]
    return ((0.5 + 0.4 * torch.sin(6 * x + 4 * y + 0.2 * i + torch.tensor([0.0, 1.0, 2.0]))) * 255).to(torch.uint8)


def test_the_buffer_keeps_the_newest_frames_and_counts_what_it_drops():
    buf = FrameBuffer(capacity=5)
    for i in range(8):
        buf.push(_frame(i))
    assert (buf.received, buf.dropped) == (8, 3)
    taken = buf.take(2)
    assert torch.equal(taken[0], _frame(6)) and torch.equal(taken[1], _frame(7)) and buf.dropped == 6
    assert buf.take(1, wait_s=0.1) is None  # nothing came: the run does not wait forever
    buf.close()
    assert buf.take(1) is None


def test_a_camera_frame_is_checked_and_fitted(tmp_path):
    import io

    from PIL import Image

    raw = io.BytesIO()
    Image.new("RGB", (96, 48), (200, 10, 10)).save(raw, format="PNG")
    frame = decode_frame(raw.getvalue(), (H, W))  # 2:1 -> 3:2: centre-cropped, resized
    assert frame.shape == (H, W, 3) and frame.dtype == torch.uint8 and int(frame[..., 0].float().mean()) in range(195, 206)
    bomb = io.BytesIO()  # a few KB that would decode to 16 M pixels: refused as too large, not read
    Image.new("RGB", (4000, 4000), (1, 2, 3)).save(bomb, format="PNG", optimize=True)
    for body, status in ((b"", 400), (b"not a picture", 400), (b"x" * (9 << 20), 413), (bomb.getvalue(), 413)):
        with pytest.raises(LiveRequestError) as e:
            decode_frame(body, (H, W))
        assert e.value.status == status


def live_v2v(m, tmp_path, changes: dict, memo=None, frames_per_push: int = 3, blocks: int = 4):
    """A video-to-video live run fed by a producer thread (a camera faster than the run: frames are dropped)."""
    source = LiveSource(tmp_path / "live_input.rgb", (H, W), live_digest("test-session"))
    buf = FrameBuffer()
    controls = LiveControls(LiveSettings(tau=-0.8, prompt=PROMPTS[0], strength=0.7))
    engine = engine_of(m, memo)
    run = LiveRun(engine, lambda b: controls.take(), PromptBook(encode), frames=buf, source=source)
    done = threading.Event()

    def camera():
        i = 0
        while not done.is_set():
            buf.push(_frame(i))
            i += 1
            if i % frames_per_push == 0:
                done.wait(0.001)

    producer = threading.Thread(target=camera, daemon=True)
    producer.start()

    def on_block(eng, state):
        request = changes.get(len(state.blocks) - 1)
        if request is not None:
            controls.apply(request)

    spec = spec_of(blocks, pixels=PixelInput("video_to_video", source, 0.7))
    try:
        final = run.run(engine.start(spec), on_block)
    finally:
        done.set()
        producer.join()
    return final, run.timeline, source


@pytest.mark.slow
def test_a_live_input_is_recorded_and_its_replay_is_bit_for_bit(models, tmp_path):
    final, tl, source = live_v2v(models, tmp_path, {1: {"strength": 0.5}})
    assert len(final.blocks) == 4 and final.spec.pixels.digest == source.digest
    assert [b.input for b in tl.blocks] == [(0, 9), (9, 12), (21, 12), (33, 12)]
    assert [b.strength for b in tl.blocks] == [0.7, 0.7, 0.5, 0.5]
    assert tl.received_frames > 45 and 0 < tl.dropped_frames <= tl.received_frames - 45  # a camera faster than the run
    assert source.recorded == 45 and (tmp_path / "live_input.rgb").stat().st_size == 45 * H * W * 3
    rec = open_recording(tmp_path / "live_input.rgb", (H, W), tl.input_digest)
    replay, _ = replayed(models, Timeline.from_dict(tl.to_dict()), blocks=4, source=rec)
    assert replay.lineage == final.lineage


@pytest.mark.slow
def test_a_block_made_at_another_strength_is_not_taken_from_the_memo(models, tmp_path):
    """Two live runs of the same input share a memo; one lowers the strength after block 1: its block 2 is denoised
    from another step plan, so it must be computed, not found under the same lineage (the block key names the plan)."""
    memo = TieredMemo(1 << 30)
    a, _, src = live_v2v(models, tmp_path, {}, memo=memo, blocks=3)
    rec = open_recording(src.path, (H, W), src.digest)
    tl = Timeline.from_dict({"version": 1, "prompts": [PROMPTS[0]], "input_file": src.path.name,
                             "input_hw": [H, W], "input_digest": src.digest,
                             "blocks": [{"block": b, "policy": "sdvg:tau=-0.8", "tau": -0.8, "prompt": 0,
                                         "strength": s, "input": None}
                                        for b, s in enumerate((0.7, 0.7, 0.4))]})
    b, _ = replayed(models, tl, blocks=3, memo=memo, source=rec)
    assert [x.lineage for x in b.blocks[:2]] == [x.lineage for x in a.blocks[:2]]
    assert b.blocks[2].lineage != a.blocks[2].lineage  # another strength, another block
    assert not {"drafter", "target"} & set(b.blocks[2].reused), b.blocks[2].reused  # its contexts may be reused
    assert {"drafter", "target"} & set(b.blocks[1].reused)  # the shared memo is used: block 1 came from run a


@pytest.mark.slow
def test_the_demo_replays_a_live_report_bit_for_bit(models, tmp_path):
    """`python -m sdvg_core.demo --replay report.json`: the recorded seed, size, recipe and blocks, each block under its
    recorded settings, on the demo's own tiny models, give the recorded lineage."""
    import json

    from sdvg_core import build_report
    from sdvg_core.demo.cli import main

    final, tl, engine = live_run(models, CHANGES)
    tl.run = {"width": W, "height": H, "seed": 7, "max_blocks": BLOCKS, "recipe": "krea", "drafter_recipe": "auto",
              "input": "none", "models": dict(engine.model_keys)}
    report = build_report(final, "live", engine.recipe, engine.recipe.plan.num_steps, live=tl.to_dict(),
                          meta={"lineage": final.lineage})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(report.to_json())
    out = tmp_path / "replay"
    assert main(["--replay", str(tmp_path / "run" / "report.json"), "--out", str(out), "--quiet"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["meta"]["lineage"] == final.lineage
    assert [b["policy"] for b in again["live"]["blocks"]] == [b.policy for b in tl.blocks]
    assert again["num_blocks"] == BLOCKS and again["live"]["run"]["seed"] == 7


def test_the_demo_refuses_a_report_that_is_not_a_live_run(tmp_path, capsys):
    from sdvg_core.demo.cli import main

    (tmp_path / "r.json").write_text('{"policy": "x"}')
    assert main(["--replay", str(tmp_path / "r.json")]) == 2
    assert "not a live run's report" in capsys.readouterr().err
    assert main(["--replay", str(tmp_path / "missing.json")]) == 2
