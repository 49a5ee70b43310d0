"""What a run shows and gives in ComfyUI: a progress bar over its model calls with the newest committed frame as
preview, its frames as IMAGE ([B, H, W, 3] float 0..1), and a finished run's outputs (frames or the saved video's
preview, the report as text and JSON, the score plot)."""
from __future__ import annotations

import torch

import comfy.model_management as mm
import comfy.utils
from comfy_api.latest import io

from ..sdvg_core.engine.engine import Engine, ProgressEvent
from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.report import RunReport, build_report, compiled_models
from .session import Run, current_run_id
from .video_file import PREVIEW_FRAMES, WAN_FPS, StreamingVideo, metadata_of

PREVIEW_SIZE = 512  # longest side of a progress preview (ComfyUI's default max preview resolution)


# ------------------------------------------------------------------------------------------------ frames as images
def to_pil(frame: torch.Tensor):
    """[H, W, 3] 0..1 -> PIL image (truncating, as ComfyUI's savers do)."""
    from PIL import Image

    return Image.fromarray((frame.detach().float().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy())


def to_image_batch(img) -> torch.Tensor:
    """PIL image -> ComfyUI IMAGE [1, H, W, 3] float 0..1."""
    import numpy as np

    return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0)[None]


def image_output(frames: torch.Tensor) -> torch.Tensor:
    """Frames [T, H, W, 3] as an IMAGE output: float32 on ComfyUI's intermediate device."""
    return frames.detach().to(mm.intermediate_device(), torch.float32)


# ------------------------------------------------------------------------------------------------ progress
class BlockProgress:
    """One bar over a whole generation's model calls, with the newest committed frame as preview per block
    (`previews` False: the bar only, where the node shows the blocks itself: SDVG Live's panel)."""

    def __init__(self, num_blocks: int, steps_per_block: int, first_block: int = 0, previews: bool = True):
        self.previews = previews
        self.steps = max(steps_per_block, 1)
        self.first = first_block
        self.total = max(num_blocks - first_block, 1) * self.steps
        self.bar = comfy.utils.ProgressBar(self.total)
        self.value = 0

    def __call__(self, ev: ProgressEvent) -> None:
        base = (ev.block - self.first) * self.steps
        if ev.kind == "step":
            value = base + min(ev.step, self.steps - 1)
            preview = None
        else:
            value = base + self.steps
            preview = (("JPEG", to_pil(ev.preview), PREVIEW_SIZE) if ev.preview is not None and self.previews
                       else None)
        self.value = max(self.value, value)
        self.bar.update_absolute(self.value, self.total, preview)


class StepProgress:
    """One bar over one node's model calls (one block's steps); a committed block adds its last frame as preview."""

    def __init__(self, steps: int):
        self.steps = steps
        self.bar = comfy.utils.ProgressBar(steps)

    def __call__(self, ev: ProgressEvent) -> None:
        if ev.kind == "step":
            self.bar.update_absolute(min(ev.step, self.steps), self.steps)
        elif ev.preview is not None:
            self.bar.update_absolute(self.steps, self.steps, ("JPEG", to_pil(ev.preview), PREVIEW_SIZE))


# ------------------------------------------------------------------------------------------------ a finished run
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


def open_video(run: Run, filename_prefix: str, hidden) -> StreamingVideo:
    """The file a saving node writes this run's video to (the given frames, then every block of the spec as it is
    committed)."""
    spec = run.state.spec
    total = run.state.given_frames + run.session.vae.config.pixel_frames(spec.num_latent_frames)
    return StreamingVideo(filename_prefix, spec.width, spec.height, total, metadata=metadata_of(hidden))


def _report(run: Run, wall: float | None, engine: Engine, frames: int) -> RunReport:
    """The run's report; the target-only baseline is counted with the plan the engine ran (Engine.plan_for: a
    video-to-video run's strength plan), so a target-only run counts 1.00x."""
    s = run.session
    meta = {"target": s.target.info, "drafter": s.drafter.info if s.drafter else "-",
            "image_reward": s.scorer.info if s.scorer else "-", "lineage": run.state.lineage, "frames": str(frames)}
    return build_report(run.state, run.policy or "-", s.config.recipe_for("target"),
                        engine.plan_for(run.state.spec, "target").num_steps, wall_seconds=wall, meta=meta,
                        run_id=engine.callbacks.run_id or current_run_id(), drafter_recipe=s.config.recipe_for("drafter"),
                        compiled=compiled_models(s.target.dit, s.drafter.dit if s.drafter else None),
                        route_decoder=engine.route_decoder, output_decoder=engine.output_decoder)


def finish_outputs(run: Run, wall: float | None, engine: Engine, frames: torch.Tensor | None = None,
                   video: StreamingVideo | None = None) -> tuple:
    """(frames, report table, plot, report JSON, saved video) of a run; `engine` the one that ran it; `frames` the
    output video when it was gathered, or `video` the file it was written to (then `frames` is the file's preview)."""
    if video is not None:
        count, frames = video.frames_written, video.preview()
    else:
        frames = engine.frames(run.state) if frames is None else frames
        count = frames.shape[0]
    report = _report(run, wall, engine, count)
    plot = to_image_batch(render_report_plot(report))  # the report's tau; +inf: the plot says why every block is forced
    spec = run.state.spec
    head = f"{count} frames at {spec.width}x{spec.height} ({WAN_FPS} fps), seed {spec.seed}"
    if video is not None:
        sub = f"{video.subfolder}/" if video.subfolder else ""
        head += (f"\nvideo: output/{sub}{video.file} ({video.frames_written} frames, written block by block); "
                 f"'frames' holds {frames.shape[0]} of them (one in {video.stride})")
    table = head + "\n" + report.table()
    if not run.state.done:
        table = f"(partial: {len(run.state.blocks)} of {run.state.spec.num_blocks} blocks committed)\n" + table
    return image_output(frames), table, plot, report.to_json(), "" if video is None else video.relative_path
