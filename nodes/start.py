"""SDVG Start: the empty generation state the per-block nodes and the loop work on."""
from __future__ import annotations

from comfy_api.latest import io, ui

from ..sdvg_core.given.request import VIDEO_MODES, VideoToVideo
from . import shared_memo
from .routing import route_input
from .session import AUTO, describe_start, pixel_input, pixel_inputs, prepare_run, run_inputs, start
from .surface import CATEGORY, SDVGState, show_text


class SDVGStart(io.ComfyNode):
    """Makes the empty generation state the per-block nodes and the loop work on."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGStart", display_name="SDVG Start", category=CATEGORY,
            description="Sets up a speculative generation: models, VAE, prompt, size, number of blocks, seed, and "
                        "optionally a start image or an input video to restyle or continue.",
            inputs=run_inputs() + pixel_inputs() + [route_input()],
            outputs=[SDVGState.Output(display_name="state", tooltip="the empty state (no block committed yet)")],
        )

    @classmethod
    def execute(cls, target, vae, positive=None, prompt="", width=832, height=480, num_blocks=9, seed=42,
                recipe="krea", decode_rule="standard", cache_gb=shared_memo.DEFAULT_CACHE_GB, drafter=None,
                image_reward=None, schedule=None, drafter_recipe=AUTO, target_recipe=AUTO, start_image=None,
                input_video=None, video_mode=VIDEO_MODES[0], strength=VideoToVideo.default_strength, fps=None,
                route_vae=None) -> io.NodeOutput:
        what = "SDVG Start"
        pixels = pixel_input(what, start_image, input_video, video_mode, strength, fps)
        session, spec = prepare_run(what, target, vae, positive, prompt, width, height, num_blocks, seed, recipe,
                                    decode_rule, cache_gb, drafter, image_reward, schedule, drafter_recipe,
                                    target_recipe, pixels, route_vae=route_vae)
        run = start(what, session.engine(), session, spec)
        text = describe_start(run)
        show_text(text)
        return io.NodeOutput(run, ui=ui.PreviewText(text))
