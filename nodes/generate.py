"""SDVG Generate: the whole speculative loop in one node (or target-only / draft-only / StrideAR for comparison),
optionally writing the video to a file block by block as the blocks are committed."""
from __future__ import annotations

import time

import torch

from comfy_api.latest import io, ui

from ..sdvg_core.derived.memo import TieredMemo
from ..sdvg_core.given.request import VIDEO_MODES, VideoToVideo
from ..sdvg_core.engine.policy import DEFAULT_TAU
from ..sdvg_core.engine.policy_names import TAU_SLIDER, PolicyNameError, parse_policy
from . import shared_memo
from .outputs import BlockProgress, finish_outputs, open_video, result_outputs
from .routing import route_input
from .session import (AUTO, MAX_FRAMES, block_steps, engine_errors, need, node_policy, node_run_id, pixel_input,
                      pixel_inputs, prepare_run, run_inputs, start)
from .surface import CATEGORY, SDVGError, sentence, show_text
from .video_file import save_inputs

# The node's policies in the core's grammar (sdvg_core/engine/policy_names): SDVG, the two baselines, and StrideAR
# (published as SpecAR: the target makes every k-th block, block 0 included, the drafter the rest, nothing scored) at
# three k. A saved workflow's older value (stride_k2, target_only, ...) is read through the core's table of them.
STRIDE_KS = (2, 3, 4)
POLICIES = ["sdvg", "target-only", "draft-only", *(f"stride:k={k}" for k in STRIDE_KS)]


class SDVGGenerate(io.ComfyNode):
    """All in one: the whole speculative loop in one node, with progress and a preview per block."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        inputs = run_inputs()
        cut = next(i for i, x in enumerate(inputs) if x.id == "seed") + 1  # the policy's options follow the seed
        return io.Schema(
            node_id="SDVGGenerate", display_name="SDVG Generate (all-in-one)", category=CATEGORY,
            description="Generates the whole video: per block the drafter proposes, ImageReward scores the frames, "
                        "and the target redoes the block when the min score < tau (block 0 always from the target). "
                        "With save_video on, each block goes to the video file as soon as it is committed.",
            inputs=inputs[:cut] + [
                io.Combo.Input("policy", options=POLICIES, default="sdvg",
                               tooltip="sdvg: route by tau. target_only: the 14B makes every block (baseline). "
                                       "draft_only: keep every draft (block 0 from the target if force_reject_first). "
                                       "stride:k=K: the StrideAR baseline, no ImageReward: the target makes every K-th "
                                       "block (blocks 0, K, 2K, ...), the drafter the rest, whatever they look like "
                                       "(stride:k=2: target, drafter, target, ...); tau and force_reject_first are "
                                       "not used."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=TAU_SLIDER[0], max=TAU_SLIDER[1], step=0.01, display_mode=io.NumberDisplay.slider,
                               tooltip="Accept a draft when its min ImageReward >= tau (policy sdvg)."),
                io.Boolean.Input("force_reject_first", default=True,
                                 tooltip="Block 0 always comes from the target; its draft is never computed."),
            ] + inputs[cut:] + [
                io.Boolean.Input("fresh_run", default=False,
                                 tooltip="On: this node neither takes results from nor leaves them in the cache shared "
                                         "by SDVG nodes, so its wall time is a fresh run's (use it to compare times, "
                                         "e.g. target-only vs SDVG). Off: moving tau recomputes only from the first "
                                         "changed block."),
                *save_inputs(),
                *pixel_inputs(),
                io.Int.Input("frames", default=0, min=0, max=MAX_FRAMES, optional=True,
                             tooltip="The video's length in frames instead of num_blocks (0: num_blocks whole blocks). "
                                     "N gives (N - 1) // 4 + 1 latent frames, as ComfyUI's video latents count "
                                     "them, in blocks of 3, the last one shorter where they do not divide (81: 7 "
                                     "blocks; 25: 3 + 3 + 1), as ComfyUI core's AR loop runs them. A start image or "
                                     "a video to extend comes before them; video-to-video needs whole blocks."),
                route_input(),
            ],
            outputs=result_outputs(),
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
            is_output_node=True,  # with save_video it is a save node: it runs even when nothing uses its outputs
        )

    @classmethod
    def validate_inputs(cls, policy: str = "sdvg") -> bool | str:
        """The policy in the core's grammar, or a value an older workflow saved (read through the core's table): the
        host's own check of combo values would refuse those."""
        try:
            parse_policy(policy)
        except PolicyNameError as e:
            return f"SDVG Generate: {sentence(e)}"
        return True

    @classmethod
    def execute(cls, target, vae, positive=None, prompt="", width=832, height=480, num_blocks=9, seed=42,
                policy="sdvg", tau=DEFAULT_TAU, force_reject_first=True, recipe="krea", decode_rule="standard",
                cache_gb=shared_memo.DEFAULT_CACHE_GB, fresh_run=False, drafter=None, image_reward=None,
                schedule=None, drafter_recipe=AUTO, target_recipe=AUTO, save_video=False,
                filename_prefix="", start_image=None, input_video=None, video_mode=VIDEO_MODES[0],
                strength=VideoToVideo.default_strength, fps=None, frames=0, route_vae=None) -> io.NodeOutput:
        what = "SDVG Generate"
        pol = node_policy(what, policy, tau, force_reject_first)
        pixels = pixel_input(what, start_image, input_video, video_mode, strength, fps)
        session, spec = prepare_run(what, target, vae, positive, prompt, width, height, num_blocks, seed, recipe,
                                    decode_rule, cache_gb, drafter, image_reward, schedule, drafter_recipe,
                                    target_recipe, pixels, frames=int(frames or 0), route_vae=route_vae)
        num_blocks = spec.num_blocks  # `frames` decides it when given
        need(what, session, spec, drafter=pol.uses_drafter, scorer=pol.uses_scorer, where=what)
        # fresh_run: a private memo for this call only (nothing taken from or left for other nodes' runs)
        memo = TieredMemo(int(cache_gb * shared_memo.GIB)) if fresh_run else shared_memo.MEMO
        # one engine per execution, started once: the generation is this node's (results another node of the same
        # execution computed count as reused), and a start image is encoded into this run's memo only
        engine = session.engine(memo=memo, run_id=node_run_id())
        # the bar counts the plan the engine runs (a video-to-video run's: its strength's steps)
        engine.callbacks.progress = BlockProgress(num_blocks, block_steps(engine, spec))
        gathered: list = []  # without a file: the output's frames, taken as each block commits (its pixels are held)
        video = None

        def on_block(engine, state) -> None:  # after each commit: the new block's frames (block 0's after the given)
            for frames in engine.output_frames(state, len(state.blocks) - 1):
                (video.write if video is not None else gathered.append)(frames)

        t0 = time.perf_counter()
        try:
            run = start(what, engine, session, spec, pol)
            video = open_video(run, filename_prefix, cls.hidden) if save_video else None
            with engine_errors(what):
                state = engine.generate(spec, pol, on_block=on_block, state=run.state)  # releases what the run held
            if video is not None:
                video.close()
            if not state.blocks:
                raise SDVGError(f"{what}: no block was made: {state.stopped}")
            run = run.with_state(state)
            wall = time.perf_counter() - t0
            outputs = finish_outputs(run, wall, engine, None if video is not None else torch.cat(gathered), video)
        finally:  # finished or cancelled: the file is closed (playable up to the last block written)
            if video is not None:
                video.close()
            shared_memo.release_run(memo)
        show_text(outputs[1])
        return io.NodeOutput(*outputs, ui=ui.PreviewText(outputs[1]))
