"""SDVG Live: the SDVG loop as a live stream into the ComfyUI page (docs/live.md). The run is sdvg_core's LiveRun;
this node adapts ComfyUI to it: its inputs and models, its server's routes and websocket (nodes/live_server.py), its
output folder (the video written as blocks commit, the report with the live timeline, the recorded input), and a
replay of an earlier live run's report."""
from __future__ import annotations

import logging
import os
import time
import uuid

from comfy_api.latest import io, ui

from ..sdvg_core.engine.policy import DEFAULT_TAU
from ..sdvg_core.engine.policy_names import TAU_SLIDER
from ..sdvg_core.engine.prompts import PromptSchedule
from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.report import build_report, compiled_models
from ..sdvg_core.engine.state import MAX_BLOCKS
from ..sdvg_core.given.request import PixelInput, VideoToVideo
from ..sdvg_core.live.controls import LiveControls, LiveSettings
from ..sdvg_core.live.frames import (FRAMES_PER_BLOCK_PIXELS, RECORDING_SUFFIX, FrameBuffer, LiveSource, live_digest,
                                    open_recording)
from ..sdvg_core.live.session import LIVE_RECIPES, LiveRun, live_policy, replay_settings
from ..sdvg_core.live.timeline import Timeline
from . import live_server, shared_memo
from .live_session import (BLOCK_SECONDS, WHAT, LiveStream, VideoFeeder, check_same_models, prepared_prompts,
                           read_replay, run_folder)
from .outputs import BlockProgress, image_output, to_image_batch
from .routing import route_input
from .session import AUTO, ROLE_RECIPES, block_steps, engine_errors, need, node_run_id, prepare_run, start
from .surface import CATEGORY, SDVGError, SDVGModel, SDVGReward, SDVGSchedule, show_text
from .video_file import WAN_FPS, StreamingVideo, metadata_of

LOG = logging.getLogger("SDVG")

INPUTS = ("none", "camera", "video")  # what a video-to-video live run reads: nothing (text-to-video), the page's camera,
# or the connected IMAGE frames played as a camera at the run's frame rate
DEFAULT_MAX_BLOCKS = 400  # 5 minutes of video at 0.75 s a block; Stop ends it earlier
DEFAULT_PREFIX = "sdvg_live/SDVG_LIVE"
REPORT_JSON, REPORT_PNG, RECORDING = "report.json", "report.png", "live_input" + RECORDING_SUFFIX


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
                io.Combo.Input("recipe", options=list(LIVE_RECIPES), default=LIVE_RECIPES[0],
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
                route_input(),
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
                positive=None, clip=None, input_video=None, route_vae=None) -> io.NodeOutput:
        recorded = read_replay(replay) if str(replay).strip() else None
        if recorded is not None:  # the recorded run's own settings, whatever the widgets say
            timeline, folder_of_report = recorded
            r = timeline.run
            width, height, seed, recipe, drafter_recipe = (int(r["width"]), int(r["height"]), int(r["seed"]),
                                                           r["recipe"], r["drafter_recipe"])
            max_blocks, input = int(r["max_blocks"]), r["input"]  # the spec's length names the lineage
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
                                    AUTO, pixels, route_vae=route_vae)
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
        run_opts = {"width": width, "height": height, "seed": seed, "max_blocks": max_blocks, "recipe": recipe,
                    "drafter_recipe": drafter_recipe, "input": input, "models": dict(engine.model_keys)}
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
        video = StreamingVideo(f"{rel}/video", width, height, total_frames=max_blocks * FRAMES_PER_BLOCK_PIXELS,
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
                              live=live.timeline.to_dict(), route_decoder=engine.route_decoder,
                              output_decoder=engine.output_decoder)
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


def _own_id(cls) -> str | None:
    uid = getattr(getattr(cls, "hidden", None), "unique_id", None)
    return None if uid is None else str(uid).rsplit(".", 1)[-1]
