"""SDVG Finish (a loop's committed frames or its saved video, the report and the score plot) and SDVG Show Video
(plays a video a node saved block by block)."""
from __future__ import annotations

from comfy_api.latest import io, ui

from . import shared_memo
from .outputs import finish_outputs, open_video, result_outputs
from .session import Run
from .surface import CATEGORY, SDVGError, SDVGState, show_text
from .video_file import save_inputs, saved_video_ui


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
                for frames in engine.output_frames(state.state):  # the given frames first, as Generate writes
                    video.write(frames)
                video.close()
            outputs = finish_outputs(state, None, engine, video=video)
        finally:  # the generation ends here: what it held outside the memo's budget goes
            if video is not None:
                video.close()
            shared_memo.release_run()
        show_text(outputs[1])
        return io.NodeOutput(*outputs, ui=ui.PreviewText(outputs[1]))


class SDVGShowVideo(io.ComfyNode):
    """Plays the video SDVG Generate / SDVG Finish saved block by block (save_video on)."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGShowVideo", display_name="SDVG Show Video", category=CATEGORY,
            description="Plays a video SDVG Generate or SDVG Finish wrote to the output folder with save_video on "
                        "(the file itself: nothing is decoded, copied or held in memory).",
            inputs=[io.String.Input("video", force_input=True,
                                    tooltip="the 'video' output of SDVG Generate / SDVG Finish (a file under the "
                                            "output folder)")],
            outputs=[],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, video: str) -> io.NodeOutput:
        if not video:
            text = "no video was saved: turn save_video on in SDVG Generate / SDVG Finish"
            return io.NodeOutput(ui={"text": (text,)})
        return io.NodeOutput(ui=saved_video_ui(video))
