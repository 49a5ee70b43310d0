"""SDVG Sampler (AR video): SDVG as a SAMPLER for ComfyUI core's autoregressive video workflow (0.33+: Empty AR Video
Latent / AR Video I2V, a guider, a scheduler, SamplerCustomAdvanced, VAE Decode). It takes the place of core's Sampler
AR Video: the guider's MODEL is the target, the drafter and ImageReward come in on this node, and it returns the video
latent VAE Decode decodes, made block by block with SDVG's routing (the run: nodes/ar_sampling.py; docs/comfyui.md, "SDVG
inside ComfyUI's own AR workflow"). SDVG AR Report gives that run's report to viewer nodes.
"""
from __future__ import annotations

from comfy_api.latest import io

from ..sdvg_core.engine.comfy_ar import AR_RECIPES
from ..sdvg_core.engine.config import DECODE_RULES
from ..sdvg_core.engine.policy import DEFAULT_TAU
from ..sdvg_core.engine.policy_names import TAU_SLIDER
from . import shared_memo
from .outputs import to_image_batch
from .ar_sampling import KEPT_REPORTS, POLICIES, WHAT, AROptions, ar_sampler, check_options, missing_inputs, report_of
from .surface import CATEGORY, SDVGError, SDVGModel, SDVGReward

NODE_ID = "SDVGSamplerARVideo"
# core's Sampler AR Video's default (comfy_extras/nodes_ar_video.py: 1, frame-wise Causal Forcing, what core's
# video_causal_forcing_i2v template runs): a workflow swapping core's sampler for SDVG's keeps its block size
DEFAULT_FRAMES_PER_BLOCK = 1
REPORT_FOLDER_PREFIX = "sdvg_ar/SDVG_AR"  # report.json / report.png under ComfyUI's output folder


class SDVGSamplerARVideo(io.ComfyNode):
    """SDVG as a drop-in for core's Sampler AR Video: a SAMPLER for SamplerCustomAdvanced / SamplerCustom."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=NODE_ID, display_name=WHAT, category=f"{CATEGORY}/sampling",
            description="Put it where core's Sampler AR Video was (SamplerCustomAdvanced's sampler): the guider's "
                        "MODEL is the target, this node's drafter proposes every block, ImageReward scores it, and the "
                        "target redoes a block whose min score < tau. Takes core's latent, start image (AR Video I2V), "
                        "sigmas, noise and conditioning as they are; gives the LATENT VAE Decode decodes. Blocks of "
                        "num_frame_per_block latent frames, the last one shorter where they do not divide the "
                        "length, as core runs them.",
            inputs=[
                io.Int.Input("num_frame_per_block", default=DEFAULT_FRAMES_PER_BLOCK, min=1, max=64,
                             tooltip="Latent frames per block, as on core's Sampler AR Video (1: frame-wise Causal "
                                     "Forcing; 3: Self-Forcing and Causal Forcing chunk-wise). Must match what both "
                                     "models were trained for; the last block is shorter where the length asks it, "
                                     "as in core's loop."),
                io.Model.Input("drafter", optional=True,
                               tooltip="The drafter as a ComfyUI MODEL (Load Diffusion Model of a Wan 2.1 1.3B "
                                       "Self-Forcing / Causal Forcing safetensors). Or use 'sdvg_drafter'. Not needed "
                                       "for target_only."),
                SDVGModel.Input("sdvg_drafter", optional=True,
                                tooltip="The drafter from SDVG Load Drafter (reads self_forcing_dmd.pt, Causal Forcing "
                                        "and LongLive files, with LoRA). Leave 'drafter' unconnected then."),
                io.Vae.Input("vae", optional=True,
                             tooltip="The Wan 2.1 VAE (Load VAE): decodes each draft for ImageReward. Needed for "
                                     "policy sdvg only (the video itself is decoded by VAE Decode after the sampler)."),
                SDVGReward.Input("image_reward", optional=True,
                                 tooltip="ImageReward (SDVG Load ImageReward): scores each draft. Needed for policy "
                                         "sdvg."),
                io.String.Input("prompt", multiline=True, default="",
                                tooltip="The prompt text ImageReward compares each draft with (the text you encoded "
                                        "for the guider)."),
                io.Combo.Input("policy", options=POLICIES, default="sdvg",
                               tooltip="sdvg: keep a draft when its min frame score >= tau, else the target redoes "
                                       "the block. target-only: every block from the guider's MODEL (core's result). "
                                       "draft-only: every draft kept (block 0 from the target if force_reject_first)."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=TAU_SLIDER[0], max=TAU_SLIDER[1], step=0.01,
                               display_mode=io.NumberDisplay.slider,
                               tooltip="Accept a draft when its min ImageReward >= tau (policy sdvg)."),
                io.Boolean.Input("force_reject_first", default=True,
                                 tooltip="Block 0 always comes from the target; its draft is never computed."),
                io.Combo.Input("drafter_recipe", options=list(AR_RECIPES), default=AR_RECIPES[0],
                               tooltip="The drafter's KV cache rule. self_forcing: the whole video, as core's loop "
                                       "(and the target) keep it. longlive: a frame sink plus a sliding window "
                                       "(LongLive drafters)."),
                io.Combo.Input("decode_rule", options=list(DECODE_RULES), default="standard",
                               tooltip="VAE streaming rule of the drafts ImageReward sees. standard: equals VAE "
                                       "Decode. krea: Krea's cache rule."),
                io.Float.Input("cache_gb", default=shared_memo.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                               tooltip="Memory kept for SDVG's reusable caches, so a re-queue after moving tau "
                                       "recomputes only from the first changed block."),
                io.String.Input("filename_prefix", default=REPORT_FOLDER_PREFIX,
                                tooltip="Where report.json and report.png go under ComfyUI's output folder."),
            ],
            outputs=[io.Sampler.Output(display_name="SAMPLER",
                                       tooltip="for SamplerCustomAdvanced's (or SamplerCustom's) sampler input")],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def validate_inputs(cls, policy: str | None = None, input_types=None) -> bool | str:
        """Before anything runs (ComfyUI's validation of the queued graph): the policy is a name of the core's grammar
        (an older workflow's target_only, draft_only: the core's table reads them, which the host's own combo check
        would refuse) and the inputs it uses are connected, named when one is not. A policy fed by a link (no value
        yet) is checked when the node runs."""
        if policy is None:
            return True
        return missing_inputs(str(policy), set(input_types or ())) or True

    @classmethod
    def execute(cls, num_frame_per_block=DEFAULT_FRAMES_PER_BLOCK, vae=None, prompt="", policy="sdvg",
                tau=DEFAULT_TAU, force_reject_first=True, drafter_recipe=AR_RECIPES[0], decode_rule="standard",
                cache_gb=shared_memo.DEFAULT_CACHE_GB, filename_prefix=REPORT_FOLDER_PREFIX, drafter=None,
                sdvg_drafter=None, image_reward=None) -> io.NodeOutput:
        options = AROptions(int(num_frame_per_block), vae, str(prompt), policy, float(tau), bool(force_reject_first),
                            drafter_recipe, decode_rule, float(cache_gb), filename_prefix, drafter, sdvg_drafter,
                            image_reward, node_id=_own_id(cls))
        check_options(options)
        return io.NodeOutput(ar_sampler(options))


def _own_id(cls) -> str | None:
    hidden = getattr(cls, "hidden", None)
    uid = getattr(hidden, "unique_id", None)
    return None if uid is None else str(uid).rsplit(".", 1)[-1]


class SDVGARReport(io.ComfyNode):
    """The report of the SDVG Sampler (AR video) run that made a LATENT, for viewer nodes."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGARReport", display_name="SDVG AR Report", category=f"{CATEGORY}/sampling",
            description="The report of the SDVG Sampler (AR video) run that made this latent: per block who made it, "
                        "the decision and scores (the same table the sampler writes to report.json).",
            inputs=[io.Latent.Input("samples", tooltip="SamplerCustomAdvanced's output (the LATENT the SDVG sampler "
                                                       "made)")],
            outputs=[io.String.Output(display_name="report", tooltip="per-block table and the report files' paths"),
                     io.Image.Output(display_name="plot", tooltip="min score per block, tau line, bars by producer"),
                     io.String.Output(display_name="report_json", tooltip="the report as JSON (report.json)")],
        )

    @classmethod
    def execute(cls, samples) -> io.NodeOutput:
        rep = report_of(samples["samples"])
        if rep is None:
            raise SDVGError(f"SDVG AR Report: this latent was not made by {WHAT} in this ComfyUI session (or its "
                            f"report is older than the last {KEPT_REPORTS} runs): connect SamplerCustomAdvanced's "
                            f"output whose sampler is {WHAT}, and queue again")
        return io.NodeOutput(rep["table"], to_image_batch(rep["plot"]), rep["json"])


