"""SDVG Generate: the whole speculative loop in one node (or target-only / draft-only / StrideAR for comparison),
optionally writing the video to a file block by block as the blocks are committed."""
from __future__ import annotations

import time

import torch

from comfy_api.latest import io, ui

from ..sdvg_core.engine.memo import TieredMemo
from ..sdvg_core.given.request import VIDEO_MODES, VideoToVideo
from ..sdvg_core.engine.policy import DEFAULT_TAU, DraftOnly, StridePolicy, TargetOnly
from . import shared_memo
from .outputs import BlockProgress, finish_outputs, open_video, result_outputs
from .run import (AUTO, MAX_FRAMES, block_steps, engine_errors, need, node_run_id, pixel_input, pixel_inputs, run_inputs, start_run,
                  threshold_policy)
from .surface import CATEGORY, SDVGError, show_text
from .video_file import save_inputs

# StrideAR (published as SpecAR) as a baseline: the target makes every k-th block, block 0 included, the drafter the
# rest, nothing scored. A combo entry per k keeps the node's widgets (and saved workflows) as they were.
STRIDE_KS = (2, 3, 4)
STRIDE_PREFIX = "stride_k"
POLICIES = ["sdvg", "target_only", "draft_only", *(f"{STRIDE_PREFIX}{k}" for k in STRIDE_KS)]


def _stride_k(policy: str) -> int | None:
    """k of a `stride_kK` policy entry, else None."""
    return int(policy[len(STRIDE_PREFIX):]) if policy.startswith(STRIDE_PREFIX) else None


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
                                       "stride_kK: the StrideAR baseline, no ImageReward: the target makes every K-th "
                                       "block (blocks 0, K, 2K, ...), the drafter the rest, whatever they look like "
                                       "(stride_k2: target, drafter, target, ...); tau and force_reject_first are "
                                       "not used."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=-5.0, max=5.0, step=0.01, display_mode=io.NumberDisplay.slider,
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
            ],
            outputs=result_outputs(),
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
            is_output_node=True,  # with save_video it is a save node: it runs even when nothing uses its outputs
        )

    @classmethod
    def execute(cls, target, vae, positive=None, prompt="", width=832, height=480, num_blocks=9, seed=42,
                policy="sdvg", tau=DEFAULT_TAU, force_reject_first=True, recipe="krea", decode_rule="standard",
                cache_gb=shared_memo.DEFAULT_CACHE_GB, fresh_run=False, drafter=None, image_reward=None,
                schedule=None, drafter_recipe=AUTO, target_recipe=AUTO, save_video=False,
                filename_prefix="", start_image=None, input_video=None, video_mode=VIDEO_MODES[0],
                strength=VideoToVideo.default_strength, fps=None, frames=0) -> io.NodeOutput:
        what = "SDVG Generate"
        if policy not in POLICIES:
            raise SDVGError(f"{what}: policy must be one of {POLICIES}, got {policy!r}")
        pixels = pixel_input(what, start_image, input_video, video_mode, strength, fps)
        run = start_run(what, target, vae, positive, prompt, width, height, num_blocks, seed, recipe, decode_rule,
                        cache_gb, drafter, image_reward, schedule, drafter_recipe, target_recipe, pixels,
                        frames=int(frames or 0))
        num_blocks = run.state.spec.num_blocks  # `frames` decides it when given
        k = _stride_k(policy)
        pol = StridePolicy(k) if k is not None else {
            "sdvg": lambda: threshold_policy(tau, force_reject_first), "target_only": TargetOnly,
            "draft_only": lambda: DraftOnly(force_reject_first=bool(force_reject_first))}[policy]()
        if policy != "target_only":
            need(run, what, drafter=True, scorer=policy == "sdvg")
        # fresh_run: a private memo for this call only (nothing taken from or left for other nodes' runs)
        memo = TieredMemo(int(cache_gb * shared_memo.GIB)) if fresh_run else shared_memo.MEMO
        # the generation is this node's: results another node of the same execution computed count as reused
        engine = run.session.engine(memo=memo, run_id=node_run_id())
        # the bar counts the plan the engine runs (a video-to-video run's: its strength's steps)
        engine.callbacks.progress = BlockProgress(num_blocks, block_steps(engine, run.state.spec))
        video = open_video(run, filename_prefix, cls.hidden) if save_video else None
        gathered: list = []  # without a file: the output's frames, taken as each block commits (its pixels are held)
        sink = video.write if video is not None else gathered.append

        def on_block(engine, state) -> None:  # after each commit: the new block's frames (block 0's after the given)
            for frames in engine.output_frames(state, len(state.blocks) - 1):
                sink(frames)

        t0 = time.perf_counter()
        try:
            with engine_errors(what):
                state = engine.generate(run.state.spec, pol, on_block=on_block)  # releases what the run held
            if video is not None:
                video.close()
            if not state.blocks:
                raise SDVGError(f"{what}: no block was made: {state.stopped}")
            run = run.with_state(state, tau=float(tau) if policy == "sdvg" else None, policy=pol.describe())
            wall = time.perf_counter() - t0
            outputs = finish_outputs(run, wall, engine, None if video is not None else torch.cat(gathered), video)
        finally:  # finished or cancelled: the file is closed (playable up to the last block written)
            if video is not None:
                video.close()
            shared_memo.release_run(memo)
        show_text(outputs[1])
        return io.NodeOutput(*outputs, ui=ui.PreviewText(outputs[1]))
