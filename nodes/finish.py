"""SDVG Finish and the outputs every finished generation gives: frames, report (text and JSON) and the score plot."""
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

WAN_FPS = 16  # Wan 2.1's frame rate (Create Video's fps in the workflows)


def result_outputs() -> list:
    """The outputs of a finished generation (SDVG Finish and SDVG Generate), in this order."""
    return [io.Image.Output(display_name="frames", tooltip="all frames, 0..1, 16 fps"),
            io.String.Output(display_name="report", tooltip="per-block table: producer, decision, scores, forwards"),
            io.Image.Output(display_name="plot", tooltip="min score per block, tau line, bars coloured by producer"),
            io.String.Output(display_name="report_json", tooltip="the same report as JSON")]


def _report(run: Run, wall: float | None, run_id: str):
    s = run.session
    meta = {"target": s.target.info, "drafter": s.drafter.info if s.drafter else "-",
            "image_reward": s.scorer.info if s.scorer else "-", "lineage": run.state.lineage,
            "frames": str(s.vae.config.pixel_frames(len(run.state.blocks) * run.state.spec.frames_per_block))}
    return build_report(run.state, run.policy or "-", s.config.recipe, steps_per_block(run), wall_seconds=wall,
                        meta=meta, run_id=run_id)


def finish_outputs(run: Run, wall: float | None, engine=None) -> tuple:
    """(frames, report table, plot, report JSON) of a run; `engine` the one that ran it (default: over the shared memo)."""
    engine = engine or run.session.engine()
    frames = image_output(engine.frames(run.state))
    report = _report(run, wall, engine.callbacks.run_id or current_run_id())
    tau = run.tau if run.tau is not None and math.isfinite(run.tau) else None
    plot = to_image_batch(render_report_plot(report, tau))
    spec = run.state.spec
    table = f"{frames.shape[0]} frames at {spec.width}x{spec.height} ({WAN_FPS} fps), seed {spec.seed}\n" + report.table()
    if not run.state.done:
        table = f"(partial: {len(run.state.blocks)} of {run.state.spec.num_blocks} blocks committed)\n" + table
    return frames, table, plot, report.to_json()


class SDVGFinish(io.ComfyNode):
    """Committed frames (ready for ComfyUI's video nodes), the report as text/JSON and as a plot."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGFinish", display_name="SDVG Finish", category=CATEGORY,
            description="Outputs every committed frame as IMAGE (for Create Video / Save Video), the per-block "
                        "report and a plot of the block scores against tau.",
            inputs=[SDVGState.Input("state", tooltip="the final state (from SDVG Loop End)")],
            outputs=result_outputs(),
        )

    @classmethod
    def execute(cls, state: Run) -> io.NodeOutput:
        if not state.state.blocks:
            raise SDVGError("SDVG Finish: no block committed; connect the state output of SDVG Loop End")
        try:
            frames, table, plot, js = finish_outputs(state, None)
        finally:  # the generation ends here: what it held outside the memo's budget goes
            shared_memo.release_run()
        show_text(table)
        return io.NodeOutput(frames, table, plot, js, ui=ui.PreviewText(table))
