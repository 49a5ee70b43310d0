"""SDVG Finish and the outputs every finished generation gives: frames (or the saved video and a preview of it),
report (text and JSON) and the score plot."""
from __future__ import annotations

import math

from comfy_api.latest import io, ui

from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.report import build_report
from . import shared_memo
from .errors import SDVGError
from .images import image_output, to_image_batch
from .run_state import Run, current_run_id
from .start import steps_per_block
from .types import CATEGORY, SDVGState
from .ui_text import show_text
from .video_file import PREVIEW_FRAMES, WAN_FPS, StreamingVideo, metadata_of, save_inputs


def result_outputs() -> list:
    """The outputs of a finished generation (SDVG Finish and SDVG Generate), in this order."""
    return [io.Image.Output(display_name="frames",
                            tooltip=f"all frames, 0..1, {WAN_FPS} fps; with save_video on, a preview of at most "
                                    f"{PREVIEW_FRAMES} evenly spaced frames (the whole video is in the file)"),
            io.String.Output(display_name="report", tooltip="per-block table: producer, decision, scores, forwards"),
            io.Image.Output(display_name="plot", tooltip="min score per block, tau line, bars coloured by producer"),
            io.String.Output(display_name="report_json", tooltip="the same report as JSON"),
            io.String.Output(display_name="video",
                             tooltip="with save_video on: the saved file under the output folder (e.g. "
                                     "video/SDVG_00001_.mp4), for SDVG Show Video; else empty")]


def _report(run: Run, wall: float | None, run_id: str, frames: int):
    s = run.session
    meta = {"target": s.target.info, "drafter": s.drafter.info if s.drafter else "-",
            "image_reward": s.scorer.info if s.scorer else "-", "lineage": run.state.lineage, "frames": str(frames)}
    return build_report(run.state, run.policy or "-", s.config.recipe_for("target"), steps_per_block(run, "target"),
                        wall_seconds=wall, meta=meta, run_id=run_id, drafter_recipe=s.config.recipe_for("drafter"))


def committed_frame_count(run: Run) -> int:
    return run.session.vae.config.pixel_frames(len(run.state.blocks) * run.state.spec.frames_per_block)


def open_video(run: Run, filename_prefix: str, hidden) -> StreamingVideo:
    """The file a saving node writes this run's video to (every block of the spec, as they are committed)."""
    spec = run.state.spec
    total = run.session.vae.config.pixel_frames(spec.num_latent_frames)
    return StreamingVideo(filename_prefix, spec.width, spec.height, total, metadata=metadata_of(hidden))


def finish_outputs(run: Run, wall: float | None, engine=None, video: StreamingVideo | None = None) -> tuple:
    """(frames, report table, plot, report JSON, saved video) of a run; `engine` the one that ran it (default: over
    the shared memo); `video` the file the run was written to (then `frames` is its preview, not the whole video)."""
    engine = engine or run.session.engine()
    n = committed_frame_count(run)
    report = _report(run, wall, engine.callbacks.run_id or current_run_id(), n)
    tau = run.tau if run.tau is not None and math.isfinite(run.tau) else None
    plot = to_image_batch(render_report_plot(report, tau))
    spec = run.state.spec
    head = f"{n} frames at {spec.width}x{spec.height} ({WAN_FPS} fps), seed {spec.seed}"
    if video is not None:
        frames = image_output(video.preview())
        sub = f"{video.subfolder}/" if video.subfolder else ""
        head += (f"\nvideo: output/{sub}{video.file} ({video.frames_written} frames, written block by block); "
                 f"'frames' holds {frames.shape[0]} of them (one in {video.stride})")
    else:
        frames = image_output(engine.frames(run.state))
    table = head + "\n" + report.table()
    if not run.state.done:
        table = f"(partial: {len(run.state.blocks)} of {run.state.spec.num_blocks} blocks committed)\n" + table
    return frames, table, plot, report.to_json(), "" if video is None else video.relative_path


class SDVGFinish(io.ComfyNode):
    """Committed frames (ready for ComfyUI's video nodes) or the saved video, the report as text/JSON and a plot."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGFinish", display_name="SDVG Finish", category=CATEGORY,
            description="Outputs every committed frame as IMAGE (for Create Video / Save Video), or with save_video "
                        "writes the video block by block to the output folder; plus the per-block report and a plot "
                        "of the block scores against tau.",
            inputs=[SDVGState.Input("state", tooltip="the final state (from SDVG Loop End)"), *save_inputs()],
            outputs=result_outputs(),
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, state: Run, save_video: bool = False, filename_prefix: str = "") -> io.NodeOutput:
        if not state.state.blocks:
            raise SDVGError("SDVG Finish: no block committed; connect the state output of SDVG Loop End")
        video = open_video(state, filename_prefix, cls.hidden) if save_video else None
        engine = state.session.engine()
        try:
            if video is not None:  # the loop committed the blocks in other nodes: written here, one block at a time
                for b in range(len(state.state.blocks)):
                    video.write(engine.block_frames(state.state, b))
                video.close()
            outputs = finish_outputs(state, None, engine, video)
        finally:  # the generation ends here: what it held outside the memo's budget goes
            if video is not None:
                video.close()
            shared_memo.release_run()
        show_text(outputs[1])
        return io.NodeOutput(*outputs, ui=ui.PreviewText(outputs[1]))
