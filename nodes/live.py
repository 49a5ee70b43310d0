"""SDVG Live: the SDVG loop as a live stream into the ComfyUI page (docs/live.md). The run is sdvg_core's LiveRun;
this node adapts ComfyUI to it: its inputs and models, its server's routes and websocket (nodes/live_server.py), its
output folder (the video written as blocks commit, the report with the live timeline, the recorded input), and a
replay of an earlier live run's report."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid

import torch

import folder_paths
from comfy_api.latest import io, ui

from ..sdvg_core.engine.policy import DEFAULT_TAU
from ..sdvg_core.engine.policy_names import TAU_SLIDER
from ..sdvg_core.engine.prompts import PromptConditioning, PromptSchedule
from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.report import build_report, compiled_models
from ..sdvg_core.engine.state import MAX_BLOCKS
from ..sdvg_core.given.fit import fit_frames
from ..sdvg_core.given.request import PixelInput, VideoToVideo
from ..sdvg_core.io.text import fit_text_len
from ..sdvg_core.live.controls import LiveControls, LiveSettings
from ..sdvg_core.live.frames import RECORDING_SUFFIX, FrameBuffer, LiveSource, live_digest, open_recording
from ..sdvg_core.live.session import LiveRun, PromptBook, live_policy, replay_settings
from ..sdvg_core.live.timeline import Timeline
from . import live_server, shared_memo
from .outputs import BlockProgress, image_output, to_image_batch
from .prompt_schedule import _clip_encode
from .session import (AUTO, ROLE_RECIPES, block_steps, conditioning_embeddings, engine_errors, need, node_run_id,
                      prepare_run, start)
from .surface import CATEGORY, SDVGError, SDVGModel, SDVGReward, SDVGSchedule, sentence, show_text
from .video_file import WAN_FPS, StreamingVideo, metadata_of

LOG = logging.getLogger("SDVG")

WHAT = "SDVG Live"
INPUTS = ("none", "camera", "video")  # what a video-to-video live run reads: nothing (text-to-video), the page's camera,
# or the connected IMAGE frames played as a camera at the run's frame rate
DEFAULT_MAX_BLOCKS = 400  # 5 minutes of video at 0.75 s a block; Stop ends it earlier
DEFAULT_PREFIX = "sdvg_live/SDVG_LIVE"
REPORT_JSON, REPORT_PNG, RECORDING = "report.json", "report.png", "live_input" + RECORDING_SUFFIX
BLOCK_SECONDS = 12 / WAN_FPS  # 12 frames a block at 16 fps: the real time a block's video lasts


class SDVGLive(io.ComfyNode):
    """Streams the video into the page as blocks commit; tau, the prompt and the drafter change while it plays."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGLive", display_name="SDVG Live", category=CATEGORY,
            description="Runs SDVG block by block until Stop (or max_blocks) and plays the video on this node as "
                        "blocks commit; tau, the prompt, the drafter and a camera's strength change from the node's "
                        "panel at the next block. Every run's report holds its timeline: a replay (the 'replay' input) "
                        "makes the same video bit for bit.",
            inputs=[
                SDVGModel.Input("target", tooltip="The 14B target (SDVG Load Target): block 0 and rejected blocks."),
                SDVGModel.Input("drafter", optional=True, tooltip="The 1.3B drafter (SDVG Load Drafter)."),
                SDVGReward.Input("image_reward", optional=True,
                                 tooltip="ImageReward (SDVG Load ImageReward): scores each draft against tau."),
                io.Vae.Input("vae", tooltip="The Wan 2.1 VAE (Load VAE): decodes what the page plays."),
                SDVGSchedule.Input("prompts", optional=True,
                                   tooltip="Prompts prepared before the run (SDVG Prompt Schedule): the first starts the "
                                           "video, the page switches to any of them instantly. Or connect 'positive'."),
                io.Conditioning.Input("positive", optional=True,
                                      tooltip="One prompt (CLIP Text Encode with a wan CLIP, or SDVG Load Prompt "
                                              "Embeddings), if 'prompts' is not connected; its text goes in 'prompt'."),
                io.String.Input("prompt", multiline=True, default="",
                                tooltip="The text of 'positive' (ImageReward scores against it)."),
                io.Clip.Input("clip", optional=True,
                              tooltip="A wan CLIP (Load CLIP): encodes prompts typed on the page. Without it the page "
                                      "switches among the prepared prompts only."),
                io.Int.Input("width", default=832, min=16, max=4096, step=16, tooltip="Video width (multiple of 16)."),
                io.Int.Input("height", default=480, min=16, max=4096, step=16, tooltip="Video height (multiple of 16)."),
                io.Int.Input("max_blocks", default=DEFAULT_MAX_BLOCKS, min=1, max=MAX_BLOCKS,
                             tooltip="The run ends here unless Stop ends it first (0.75 s of video a block)."),
                io.Int.Input("seed", default=42, min=0, max=0xFFFFFFFFFFFFFFFF, control_after_generate=True,
                             tooltip="Noise seed; drafter and target share each block's noise."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=TAU_SLIDER[0], max=TAU_SLIDER[1], step=0.01,
                               display_mode=io.NumberDisplay.slider,
                               tooltip="Tau at the start; the page's slider moves it while the video plays."),
                io.Combo.Input("recipe", options=["krea", "longlive", "longlive_infinity"], default="krea",
                               tooltip="A context recipe that runs at any length and can change the prompt "
                                       "(krea: the published pairing; longlive: frame sink + window)."),
                io.Combo.Input("drafter_recipe", options=ROLE_RECIPES, default=AUTO,
                               tooltip="The drafter's own recipe (auto: its kind's, else 'recipe')."),
                io.Combo.Input("input", options=list(INPUTS), default=INPUTS[0],
                               tooltip="none: text-to-video. camera: the page's camera (the panel's Camera button) is "
                                       "restyled block by block. video: 'input_video' played as a camera at 16 fps."),
                io.Image.Input("input_video", optional=True,
                               tooltip="Frames (Load Video + Get Video Components) for input 'video'."),
                io.Float.Input("strength", default=VideoToVideo.default_strength, min=0.05, max=1.0, step=0.05,
                               tooltip="How far each input block is noised (camera / video input); the page changes "
                                       "it while the video plays."),
                io.Float.Input("cache_gb", default=shared_memo.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                               tooltip="Memory kept for SDVG's reusable caches (shared by all SDVG nodes)."),
                io.String.Input("filename_prefix", default=DEFAULT_PREFIX,
                                tooltip="Where each run's folder goes under ComfyUI's output folder: its video, "
                                        "report.json (with the live timeline) and the recorded input."),
                io.String.Input("replay", default="",
                                tooltip="A live run's report (its path under the output folder, e.g. "
                                        "sdvg_live/SDVG_LIVE_00001_/report.json): runs that run's timeline again, "
                                        "bit for bit, with the same models. Empty: a new live run."),
            ],
            outputs=[io.Image.Output(display_name="frames", tooltip="a preview of the video (evenly spaced frames)"),
                     io.String.Output(display_name="report", tooltip="per-block table and the live run's files"),
                     io.Image.Output(display_name="plot", tooltip="min score per block against tau"),
                     io.String.Output(display_name="report_json", tooltip="the report with the live timeline"),
                     io.String.Output(display_name="video", tooltip="the video file under the output folder")],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt, io.Hidden.extra_pnginfo],
            is_output_node=True,
        )

    @classmethod
    def fingerprint_inputs(cls, **kwargs) -> str:
        """Every queue press is a new live session (ComfyUI would otherwise serve the last one from its cache)."""
        return uuid.uuid4().hex

    @classmethod
    def execute(cls, target, vae, prompt="", width=832, height=480, max_blocks=DEFAULT_MAX_BLOCKS, seed=42,
                tau=DEFAULT_TAU, recipe="krea", drafter_recipe=AUTO, input=INPUTS[0],
                strength=VideoToVideo.default_strength, cache_gb=shared_memo.DEFAULT_CACHE_GB,
                filename_prefix=DEFAULT_PREFIX, replay="", drafter=None, image_reward=None, prompts=None,
                positive=None, clip=None, input_video=None) -> io.NodeOutput:
        recorded = read_replay(replay) if str(replay).strip() else None
        if recorded is not None:  # the recorded run's own settings, whatever the widgets say
            timeline, folder_of_report = recorded
            r = timeline.run
            width, height, seed, recipe, drafter_recipe = (int(r["width"]), int(r["height"]), int(r["seed"]),
                                                           r["recipe"], r["drafter_recipe"])
            # the recorded run's length (the root lineage names it), not the blocks it made: Stop ends the replay
            # where the recording does (replay_settings), so the replay's lineage is the recorded run's
            max_blocks, input = int(r.get("max_blocks", len(timeline.blocks))), r["input"]
            if timeline.blocks[0].strength is not None:
                strength = timeline.blocks[0].strength
        if input not in INPUTS:
            raise SDVGError(f"{WHAT}: input must be one of {list(INPUTS)}, got {input!r}")
        if input == "video" and input_video is None and recorded is None:
            raise SDVGError(f"{WHAT}: input 'video' plays the connected frames as a camera: connect 'input_video' "
                            f"(Load Video + Get Video Components), or choose input none or camera")
        book, first = prepared_prompts(prompts, positive, prompt, clip, target.dit.cfg.text_len)
        folder, rel = run_folder(filename_prefix, width, height)
        run_id = uuid.uuid4().hex
        source = None
        if input != "none":
            if recorded is not None:
                source = open_recording(os.path.join(folder_of_report, timeline.input_file), (height, width),
                                        timeline.input_digest)
            else:
                source = LiveSource(os.path.join(folder, RECORDING), (height, width), live_digest(run_id))
        pixels = None if source is None else PixelInput("video_to_video", source, float(strength))
        session, spec = prepare_run(WHAT, target, vae, None, "", width, height, max_blocks, seed, recipe, "standard",
                                    cache_gb, drafter, image_reward, PromptSchedule.one(first), drafter_recipe,
                                    AUTO, pixels)
        need(WHAT, session, spec, drafter=True, scorer=True, where=WHAT)
        if recorded is not None:
            check_same_models(timeline, session)
        engine = session.engine(run_id=node_run_id())
        recipes = engine.recipes.values()
        controls = LiveControls(
            LiveSettings(tau=float(tau), prompt=first.text, strength=None if source is None else float(strength)),
            prepared=book.texts, can_switch_prompts=all(r.supports_prompt_switch for r in recipes),
            strength_problem=lambda s: next((p for p in (VideoToVideo.recipe_problem(s, r) for r in recipes) if p),
                                            None), encodes_prompts=clip is not None)
        buffer = FrameBuffer() if source is not None and recorded is None else None
        node_id = _own_id(cls)
        run_opts = {"width": width, "height": height, "seed": seed, "recipe": recipe, "drafter_recipe": drafter_recipe,
                    "input": input, "max_blocks": max_blocks, "models": dict(engine.model_keys)}
        timeline_out = Timeline(run=run_opts)
        settings_for = (lambda b: controls.take()) if recorded is None else replay_settings(timeline)
        live = LiveRun(engine, settings_for, book, frames=buffer, source=source, timeline=timeline_out)
        start_event = {"run_id": run_id, "node": node_id, "width": width, "height": height, "fps": WAN_FPS,
                       "block_seconds": BLOCK_SECONDS, "max_blocks": max_blocks, "prepared": list(book.texts),
                       "camera": input == "camera" and recorded is None, "replay": recorded is not None,
                       "can_switch_prompts": controls.can_switch_prompts, "encodes_prompts": clip is not None,
                       "settings": controls.take().to_dict(), "folder": rel}
        handle = live_server.LiveHandle(run_id, node_id, controls, (height, width), buffer if input == "camera" else None,
                                        start_event)
        stream = LiveStream(handle, engine, spec.num_blocks)
        # the bar only: the panel plays the blocks (a preview image would repeat the player under it)
        engine.callbacks.progress = BlockProgress(max_blocks, block_steps(engine, spec), previews=False)
        feeder = VideoFeeder(buffer, input_video, (height, width)) if buffer is not None and input == "video" else None
        video = StreamingVideo(f"{rel}/video", width, height, total_frames=max_blocks * 12,
                               metadata=metadata_of(cls.hidden))
        live_server.register(handle)
        live_server.send(live_server.EVENT_START, start_event)
        t0, final, reason = time.perf_counter(), None, "error"
        try:
            state = start(WHAT, engine, session, spec).state
            if feeder is not None:
                feeder.start()

            def on_block(eng, st):
                for frames in eng.output_frames(st, len(st.blocks) - 1):
                    video.write(frames)
                stream.block(eng, st, live.timeline)

            with engine_errors(WHAT):
                final = live.run(state, on_block)
            reason = "stopped" if live.timeline.stopped_by_user else ("ended" if final.stopped else "finished")
        finally:
            if feeder is not None:
                feeder.stop()
            if buffer is not None:
                buffer.close()
            video.close()
            live_server.unregister(run_id)
            shared_memo.release_run()
            live_server.send(live_server.EVENT_END, {"run_id": run_id, "node": node_id, "reason": reason,
                                                     "blocks": 0 if final is None else len(final.blocks),
                                                     "video": video.relative_path,
                                                     "report": f"{rel}/{REPORT_JSON}"})
        if not final.blocks:
            raise SDVGError(f"{WHAT}: no block was made: {final.stopped}")
        wall = time.perf_counter() - t0
        report = build_report(final, live_policy(controls.take() if recorded is None else settings_for(len(final.blocks) - 1)),
                              session.config.recipe_for("target"), engine.plan_for(final.spec, "target").num_steps,
                              wall_seconds=wall, run_id=engine.callbacks.run_id,
                              meta={"lineage": final.lineage, "video": video.relative_path, "folder": rel,
                                    "replay_of": str(replay).strip()},
                              drafter_recipe=session.config.recipe_for("drafter"),
                              compiled=compiled_models(session.target.dit, session.drafter.dit if session.drafter else None),
                              live=live.timeline.to_dict())
        text = report.to_json()
        with open(os.path.join(folder, REPORT_JSON), "w", encoding="utf-8") as f:
            f.write(text)
        plot = render_report_plot(report)
        plot.save(os.path.join(folder, REPORT_PNG))
        table = (f"{len(final.blocks)} blocks, {video.frames_written} frames: output/{video.relative_path}\n"
                 f"report: output/{rel}/{REPORT_JSON} (replay it with the 'replay' input)\n" + report.table())
        show_text(table)
        return io.NodeOutput(image_output(video.preview()), table, to_image_batch(plot), text, video.relative_path,
                             ui=ui.PreviewText(table))


class LiveStream:
    """What the page gets of each committed block: its frames (JPEG, encoded once), who made it and its score
    against the tau in force, the settings it took, the run's pace against real time."""

    def __init__(self, handle: live_server.LiveHandle, engine, max_blocks: int):
        self.handle, self.engine, self.max_blocks = handle, engine, max_blocks
        self.t0 = time.time()

    def block(self, engine, state, timeline: Timeline) -> None:
        rec, settings = state.blocks[-1], timeline.blocks[len(state.blocks) - 1]
        frames = engine.block_frames(state, rec.index)[engine.given.hidden_frames(state, rec.index):]
        elapsed = time.time() - self.t0
        event = {"run_id": self.handle.run_id, "node": self.handle.node_id, "block": rec.index,
                 "max_blocks": self.max_blocks, "producer": rec.producer, "decision": rec.decision, "score": rec.score,
                 "tau": settings.tau, "policy": settings.policy, "prompt": timeline.prompts[settings.prompt],
                 "strength": settings.strength, "settings_version": settings.settings_version,
                 "seconds": round(sum(dict(rec.seconds).values()), 4), "t_commit": time.time(),
                 "blocks_per_second": round(len(state.blocks) / elapsed, 4) if elapsed > 0 else None,
                 "realtime_blocks_per_second": round(1 / BLOCK_SECONDS, 4),
                 "received_frames": timeline.received_frames, "dropped_frames": timeline.dropped_frames
                 + self.handle.flood_dropped, "fps": WAN_FPS}
        self.handle.recent = (self.handle.recent + [event])[-live_server.KEPT_BLOCK_EVENTS:]
        live_server.send(live_server.EVENT_BLOCK, {**event, "frames": live_server.jpeg_frames(frames)})


class VideoFeeder:
    """IMAGE frames played into a live buffer at the run's frame rate, as a camera would send them."""

    def __init__(self, buffer: FrameBuffer, frames: torch.Tensor, run_hw: tuple[int, int]):
        self.buffer, self.frames, self.run_hw = buffer, frames, run_hw
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="sdvg-live-video", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _play(self) -> None:
        for i in range(self.frames.shape[0]):
            if self._stop.wait(1 / WAN_FPS):
                return
            frame = fit_frames(self.frames[i:i + 1], self.run_hw)[0]  # [3, H, W] in 0..1
            self.buffer.push((frame.permute(1, 2, 0) * 255).round().clamp(0, 255).to(torch.uint8))
        self.buffer.close()


def prepared_prompts(prompts, positive, prompt: str, clip, text_len: int) -> tuple[PromptBook, PromptConditioning]:
    """The run's prompt book (the prepared prompts; a CLIP encodes new ones) and block 0's prompt."""
    if prompts is not None and positive is not None:
        raise SDVGError(f"{WHAT}: both 'prompts' and 'positive' are connected: connect one of them")
    if prompts is not None:
        prepared = [PromptConditioning.make(p.text, fit_text_len(p.embeddings, text_len)) for _, p in prompts]
    elif positive is not None:
        emb, carried = conditioning_embeddings(positive)
        text = prompt.strip() or carried
        if not text:
            raise SDVGError(f"{WHAT}: ImageReward needs the prompt text: fill 'prompt' with the text you encoded")
        prepared = [PromptConditioning.make(text, fit_text_len(emb, text_len))]
    else:
        raise SDVGError(f"{WHAT}: connect 'prompts' (SDVG Prompt Schedule: the prompts the page switches among) or "
                        f"'positive' (one prompt)")
    encode = None if clip is None else (lambda text: fit_text_len(_clip_encode(clip, text), text_len))
    return PromptBook(encode, prepared), prepared[0]


def run_folder(prefix: str, width: int, height: int) -> tuple[str, str]:
    """A new folder for one live run under ComfyUI's output folder: (absolute path, path under the output folder)."""
    out_dir = folder_paths.get_output_directory()
    folder, name, counter, subfolder, _ = folder_paths.get_save_image_path(prefix, out_dir, width, height)
    leaf = f"{name}_{counter:05}_"
    path = os.path.join(folder, leaf)
    os.makedirs(path, exist_ok=False)
    return path, "/".join(p for p in (subfolder.replace(os.sep, "/"), leaf) if p)


def read_replay(value: str) -> tuple[Timeline, str]:
    """(the timeline, the folder of the report) of a live run's report named under ComfyUI's output folder."""
    out_dir = os.path.abspath(folder_paths.get_output_directory())
    full = os.path.abspath(os.path.join(out_dir, str(value).strip()))
    if os.path.commonpath((out_dir, full)) != out_dir:
        raise SDVGError(f"{WHAT}: replay {value!r} is not inside ComfyUI's output folder")
    if not os.path.isfile(full):
        raise SDVGError(f"{WHAT}: replay {value!r} is not a file under the output folder ({out_dir}): give the "
                        f"report.json an SDVG Live run wrote (its 'report' output names it)")
    try:
        with open(full, encoding="utf-8") as f:
            data = json.load(f)
        timeline = Timeline.from_dict(data.get("live"))
    except (OSError, ValueError, AttributeError) as e:
        raise SDVGError(f"{WHAT}: replay {value!r} is not a live run's report: {sentence(e)}") from e
    missing = [k for k in ("width", "height", "seed", "recipe", "drafter_recipe", "input") if k not in timeline.run]
    if missing or not timeline.blocks:
        raise SDVGError(f"{WHAT}: replay {value!r} does not hold a live run to replay (missing {missing or 'blocks'})")
    return timeline, os.path.dirname(full)


def check_same_models(timeline: Timeline, session) -> None:
    """A replay runs the recorded run's models: each role's identity must be the one the report names."""
    recorded = timeline.run.get("models", {})
    now = {"target": session.target.key, "vae": session.vae.key}
    if session.drafter is not None:
        now["drafter"] = session.drafter.key
    if session.scorer is not None:
        now["scorer"] = session.scorer.key
    differ = [role for role, key in recorded.items() if now.get(role) != key]
    if differ:
        raise SDVGError(f"{WHAT}: the replay's {', '.join(differ)} differ from the recorded run's: connect the models "
                        f"that run used (the report's live.run.models names them)")


def _own_id(cls) -> str | None:
    uid = getattr(getattr(cls, "hidden", None), "unique_id", None)
    return None if uid is None else str(uid).rsplit(".", 1)[-1]
