"""A SDVG run inside ComfyUI core's autoregressive sampling (0.33+), from SDVG Sampler (AR video)'s inputs: the
SAMPLER it gives (core's KSAMPLER around SDVG's loop), core's inputs read off the sampling (guider, latent, start
latent, sigmas, noise), the engine built over them (sdvg_core.engine.comfy_ar), what the user sees while it runs and
the report it leaves (report.json / report.png in the output folder, and for SDVG AR Report)."""
from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

import comfy.model_management as mm
import comfy.samplers
import folder_paths

from ..sdvg_core.engine.comfy_ar import (AR_RECIPES, CORE_AR_RECIPE, ARVideo, StartLatentSpec, generate,
                                         latent_digest, sigma_plan, video_latents, with_plan)
from ..sdvg_core.engine.config import DECODE_RULES, EngineConfig
from ..sdvg_core.engine.decoded import NoVAE
from ..sdvg_core.engine.engine import Engine, ProgressEvent
from ..sdvg_core.engine.noise import ComfyARNoise
from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.policy import Policy
from ..sdvg_core.engine.policy_names import PolicyNameError, parse_policy
from ..sdvg_core.engine.prompts import PromptConditioning, PromptSchedule
from ..sdvg_core.engine.recipes import recipe_by_name
from ..sdvg_core.engine.report import build_report
from ..sdvg_core.engine.state import LATENT_SPATIAL
from . import shared_memo
from .comfy_compiler import compiler_off
from .comfy_model import host_comfy_model
from .hosted import DiTHandle, host_vae
from .session import Session, current_run_id, engine_errors, node_policy
from .surface import SDVGError, sentence

LOG = logging.getLogger("SDVG")

WHAT = "SDVG Sampler (AR video)"
POLICIES = ["sdvg", "target-only", "draft-only"]  # the core's grammar (older workflows' target_only...: its table)
DRAFTER_INPUTS = ("drafter", "sdvg_drafter")
# what a conditioning entry may carry besides its prompt embeddings: keys core's sampling acts on and SDVG's own
# forward does not (an area or mask, ControlNet, GLIGEN, hooks, a timestep range), refused rather than ignored
UNSUPPORTED_COND_KEYS = {"area": "ConditioningSetArea", "mask": "ConditioningSetMask", "control": "ControlNet",
                         "gligen": "GLIGEN", "hooks": "hooks", "timestep_start": "ConditioningSetTimestepRange",
                         "timestep_end": "ConditioningSetTimestepRange", "start_percent": "ConditioningSetTimestepRange",
                         "end_percent": "ConditioningSetTimestepRange"}
KEPT_REPORTS = 8  # finished runs whose report SDVG AR Report can still show (by the latent they made)
# the same latent, read back after the guider's un-normalising on its device (GPU arithmetic may differ in the last bit)
MATCH_TOLERANCE = 1e-5
_REPORTS: list[tuple[torch.Tensor, dict]] = []  # (a run's output latent as the guider gives it (CPU), its report)


@dataclass(frozen=True)
class AROptions:
    """The node's inputs, carried by the SAMPLER to the sampling (no model work happens before it)."""

    num_frame_per_block: int
    vae: Any  # a ComfyUI VAE, or None (policies that decode nothing)
    prompt: str
    policy: str
    tau: float
    force_reject_first: bool
    drafter_recipe: str
    decode_rule: str
    cache_gb: float
    filename_prefix: str
    drafter: Any = None  # a ComfyUI MODEL
    sdvg_drafter: DiTHandle | None = None  # SDVG Load Drafter's output
    image_reward: Any = None
    node_id: str | None = None  # this node, where the report is shown

    @property
    def routing(self) -> Policy:
        """The policy the inputs name (the core's grammar, tau and force_reject_first)."""
        return node_policy(WHAT, self.policy, self.tau, self.force_reject_first)


def missing_inputs(policy: str, connected: set[str]) -> str | None:
    """Why `policy` (a name of the core's grammar, or an older workflow's value) cannot run with the `connected`
    inputs (the node's input names), naming the input; None: it can. What a policy uses is the policy's to say
    (`uses_drafter`, `uses_scorer`): the VAE only decodes a draft ImageReward scores (the sampler gives latents: core's
    VAE Decode decodes the video). ComfyUI's validation (validate_inputs, before anything runs) and the node ask it."""
    try:
        spec = parse_policy(policy)
    except PolicyNameError as e:
        return f"{WHAT}: {sentence(e)}"
    if spec.name not in POLICIES and spec.kind not in POLICIES:
        return f"{WHAT}: policy must be one of {POLICIES}, got {policy!r}"
    routing = spec.policy()
    drafters = [n for n in DRAFTER_INPUTS if n in connected]
    if len(drafters) > 1:
        return f"{WHAT}: both 'drafter' and 'sdvg_drafter' are connected; connect one of them"
    if routing.uses_drafter and not drafters:
        return (f"{WHAT}: policy {policy} needs a drafter: connect 'drafter' (a MODEL) or 'sdvg_drafter' "
                f"(SDVG Load Drafter), or set policy target-only")
    if routing.uses_scorer and "image_reward" not in connected:
        return f"{WHAT}: policy {policy} scores drafts: connect SDVG Load ImageReward to 'image_reward'"
    if routing.uses_scorer and "vae" not in connected:
        return (f"{WHAT}: policy {policy} decodes each draft for ImageReward: connect the Wan 2.1 VAE (Load VAE) to "
                f"'vae' (target-only and draft-only decode nothing and need none)")
    return None


def check_options(o: AROptions) -> None:
    """Refuse, when the node runs (before any sampling), inputs that cannot make a run."""
    connected = {name for name, value in (("drafter", o.drafter), ("sdvg_drafter", o.sdvg_drafter),
                                          ("image_reward", o.image_reward), ("vae", o.vae)) if value is not None}
    why = missing_inputs(o.policy, connected)
    if why:
        raise SDVGError(why)
    if o.routing.uses_scorer and not o.prompt.strip():
        raise SDVGError(f"{WHAT}: ImageReward needs the prompt text: fill 'prompt' with the text you encoded")
    if o.drafter_recipe not in AR_RECIPES:
        raise SDVGError(f"{WHAT}: drafter_recipe must be one of {list(AR_RECIPES)}, got {o.drafter_recipe!r}")
    if o.decode_rule not in DECODE_RULES:
        raise SDVGError(f"{WHAT}: decode_rule must be one of {list(DECODE_RULES)}, got {o.decode_rule!r}")
    check_block_size(o)


def check_block_size(o: AROptions) -> None:
    """Both models run the workflow's num_frame_per_block, as core's loop runs its one MODEL. A drafter whose loader
    knows its trained block size (SDVG Load Drafter's kinds are chunk-wise: 3) is refused at another size: its
    causal structure would be wrong. A ComfyUI MODEL does not say its block size: it runs the workflow's."""
    native = getattr(o.sdvg_drafter, "block_frames", None) if o.policy != "target_only" else None
    if native is not None and native != o.num_frame_per_block:
        raise SDVGError(f"{WHAT}: the drafter from SDVG Load Drafter was trained for blocks of {native} latent frames, "
                        f"but num_frame_per_block is {o.num_frame_per_block} (both models run the workflow's block "
                        f"size, as core's loop runs its MODEL): set num_frame_per_block to {native} with a target of "
                        f"that size, or load a drafter trained for {o.num_frame_per_block}-frame blocks (e.g. "
                        f"frame-wise Causal Forcing for 1) with Load Diffusion Model into 'drafter'")


def ar_sampler(options: AROptions) -> Any:
    """The SAMPLER: core's KSAMPLER around SDVG's loop, so core prepares the noise (the Noise node's draw at the first
    sigma) and un-scales the result exactly as for its own samplers."""
    return comfy.samplers.KSAMPLER(functools.partial(sample_ar_sdvg, options=options))


def sample_ar_sdvg(model, x, sigmas, extra_args=None, callback=None, disable=None, options: AROptions | None = None):
    """Core's sampler-function interface (k_diffusion's): `model` the wrapped guider, `x` the noised latent
    [1, C, T, h, w], `sigmas` the schedule -> the video latent in the model's latent space. The model compiler is off
    from here to the end (nodes/comfy_compiler.py): before the first model call."""
    with compiler_off():
        return ARRun(options, model, x, sigmas, extra_args or {}, callback).run()


class ARRun:
    """One sampling: core's inputs read, the SDVG engine built over them, the blocks made, the report written."""

    def __init__(self, options: AROptions, model, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict,
                 callback: Callable | None):
        self.o, self.x, self.sigmas, self.extra_args, self.callback = options, x, sigmas, extra_args, callback
        self.guider = model.inner_model  # KSamplerX0Inpaint -> the guider (CFGGuider, BasicGuider...)
        self.base = self.guider.inner_model  # the MODEL's BaseModel (latent format, diffusion_model)
        self.lines: list[str] = []

    # ------------------------------------------------------------------------------------------ core's inputs
    def conditioning(self) -> torch.Tensor:
        """The guider's positive prompt embeddings [1, L, D] exactly as core passes them to the model (any L: a
        ConditioningConcat's 1024 rows, a long prompt's, a short one's; no cut, no padding). A guider that mixes in
        a negative, several entries (ConditioningCombine: core averages one prediction per entry) or an entry core's
        sampling treats in a way SDVG's own forward does not (an area, a mask, ControlNet, a timestep range) is
        refused with the reason."""
        conds = getattr(self.guider, "conds", None) or {}
        cfg = float(getattr(self.guider, "cfg", 1.0))
        if cfg != 1.0 and conds.get("negative"):
            raise SDVGError(f"{WHAT}: the guider runs classifier-free guidance (cfg {cfg:g}); SDVG runs the models "
                            f"without it, as the distilled Self-Forcing / Krea models are used: use BasicGuider, or "
                            f"cfg 1")
        positive = conds.get("positive") or []
        if not positive or positive[0].get("cross_attn") is None:
            raise SDVGError(f"{WHAT}: the guider has no positive conditioning: connect CLIP Text Encode (a 'wan' CLIP) "
                            f"to the guider's conditioning")
        if len(positive) > 1:
            raise SDVGError(f"{WHAT}: the guider's conditioning holds {len(positive)} entries (ConditioningCombine, "
                            f"or a list of prompts): core's sampling runs the model once per entry and averages the "
                            f"predictions, SDVG runs one prompt per block. Join the prompts with ConditioningConcat "
                            f"(one entry, the rows of both; it runs as in core), or give one prompt")
        found = sorted({UNSUPPORTED_COND_KEYS[k] for k in positive[0] if k in UNSUPPORTED_COND_KEYS})
        if found:
            raise SDVGError(f"{WHAT}: the guider's conditioning carries {', '.join(found)}, which core's sampling "
                            f"applies around its model call and SDVG's own forward does not: connect the prompt's "
                            f"conditioning without it")
        return positive[0]["cross_attn"][:1].float().cpu()

    def start_latents(self) -> torch.Tensor | None:
        """AR Video I2V's start latent (model_options transformer_options ar_config), in the model's latent space as
        core feeds it to the model: [1, C, g, h, w] float32 on the CPU, or None."""
        options = self.extra_args.get("model_options", {}).get("transformer_options", {})
        start = options.get("ar_config", {}).get("initial_latent")
        if start is None:
            return None
        start = self.base.process_latent_in(start).to("cpu", torch.float32)
        if start.shape[0] != 1 or start.shape[1] != self.x.shape[1] or start.shape[3:] != self.x.shape[3:]:
            raise SDVGError(f"{WHAT}: the start latent {list(start.shape)} does not fit the latent "
                            f"{list(self.x.shape)}: give AR Video I2V the same width and height")
        return start

    # ------------------------------------------------------------------------------------------ the run
    def run(self) -> torch.Tensor:
        o, x = self.o, self.x
        if x.ndim != 5 or x.shape[0] != 1:
            raise SDVGError(f"{WHAT}: needs one video latent [1, 16, T, h, w] (Empty AR Video Latent, batch_size 1); "
                            f"got {list(x.shape)}")
        start = self.start_latents()
        given = None if start is None else start.permute(0, 2, 1, 3, 4).contiguous()  # SDVG's [1, g, C, h, w]
        g = 0 if start is None else start.shape[2]
        with engine_errors(WHAT):
            plan = sigma_plan(self.sigmas)
            video = ARVideo(x.shape[2], g, o.num_frame_per_block)  # core's blocks: a shorter last one included
        policy = o.routing
        if o.vae is None and any(policy.needs_score(b) for b in range(video.num_blocks)):
            raise SDVGError(f"{WHAT}: policy {policy.describe()} scores drafts, which needs them decoded: connect the "
                            f"Wan 2.1 VAE (Load VAE) to 'vae'")
        target = host_comfy_model(self.guider.model_patcher, "target")
        drafter = o.sdvg_drafter if o.sdvg_drafter is not None else (
            host_comfy_model(o.drafter, "drafter") if o.drafter is not None and o.routing.uses_drafter else None)
        with engine_errors(WHAT):
            # the sampler gives latents (core's VAE Decode decodes them): a block is decoded only to score a draft
            config = EngineConfig.for_run(with_plan(recipe_by_name(CORE_AR_RECIPE), plan),
                                          with_plan(recipe_by_name(o.drafter_recipe), plan),
                                          decode_rule=o.decode_rule, decode_committed=False)
            # the conditioning as core passes it to the model: both DiTs read the same rows
            prompt = PromptSchedule.one(PromptConditioning.make(o.prompt.strip(), self.conditioning()))
            seed = int(self.extra_args.get("seed", 0) or 0)
            width, height = x.shape[4] * LATENT_SPATIAL, x.shape[3] * LATENT_SPATIAL
            spec = StartLatentSpec(prompt, width, height, video.num_blocks, seed, frames_per_block=video.frames_per_block,
                                   latent_frames=video.latent_frames,
                                   start_digest="" if given is None else latent_digest(given))
            shared_memo.set_cache_budget(o.cache_gb)
            vae = host_vae(o.vae) if o.vae is not None else NoVAE(needed_for=f"{WHAT}: decoding a draft")
            session = Session(target, drafter, vae, o.image_reward, config)
            session.reserve(spec)
            noise = ComfyARNoise(channels=x.shape[1], num_renoise=plan.num_renoise, device=str(x.device),
                                 first_frame=g, video=x)
            engine = self.engine(session, noise, spec.num_blocks)
            t0 = time.perf_counter()
            try:
                state = generate(engine, spec, policy, given)
            finally:
                shared_memo.release_run()
            wall = time.perf_counter() - t0
        out = video_latents(state, given)
        self.write_report(session, engine, state, policy, wall, plan.num_steps, out)
        return out.to(x.device, x.dtype)

    def engine(self, session: Session, noise: ComfyARNoise, num_blocks: int) -> Engine:
        s = session
        engine = Engine(s.target.dit, s.vae, s.drafter.dit if s.drafter else None, s.scorer, s.config,
                        noise_fn=noise, memo=shared_memo.MEMO)
        engine.callbacks.interrupt = mm.throw_exception_if_processing_interrupted
        engine.callbacks.run_id = current_run_id()
        engine.callbacks.progress = functools.partial(self.progress, num_blocks=num_blocks)
        return engine

    # ------------------------------------------------------------------------------------------ what the user sees
    def progress(self, ev: ProgressEvent, num_blocks: int) -> None:
        """Each committed block: its decision as text on the running node (and on this node), and core's progress
        callback with the block's latents (the bar and the latent preview SamplerCustomAdvanced shows)."""
        if ev.kind != "block" or ev.record is None:
            return
        r = ev.record
        score = "" if r.score is None else f" (min score {r.score:.3f}, tau {self.o.routing.tau:g})"
        self.lines.append(f"block {r.index + 1}/{num_blocks}: {r.decision} -> {r.producer}{score}")
        self.show("\n".join(self.lines[-12:]))
        if self.callback is not None:
            steps = len(self.sigmas) - 1
            latents = r.latents.permute(0, 2, 1, 3, 4).to(self.x.device, self.x.dtype)
            i = max((r.index + 1) * steps // num_blocks - 1, 0)
            self.callback({"x": latents, "i": i, "sigma": self.sigmas[-2], "sigma_hat": self.sigmas[-2],
                           "denoised": latents})

    def show(self, text: str) -> None:
        for node in dict.fromkeys(n for n in (running_node(), self.o.node_id) if n is not None):
            show_text_on(node, text)

    def write_report(self, session: Session, engine: Engine, state, policy, wall: float, steps: int,
                     out: torch.Tensor) -> None:
        """report.json and report.png under ComfyUI's output folder; the table and their paths shown on the nodes,
        and kept for SDVG AR Report under the latent the guider will return (its latent format's output)."""
        s = session
        meta = {"target": s.target.info, "drafter": s.drafter.info if s.drafter else "-",
                "image_reward": s.scorer.info if s.scorer else "-", "lineage": state.lineage,
                "sampler": f"{WHAT}: core's sigmas {[round(float(v), 4) for v in self.sigmas]}, core's noise rule"}
        report = build_report(state, policy, s.config.recipe_for("target"), steps, wall_seconds=wall,
                              meta=meta, run_id=engine.callbacks.run_id, drafter_recipe=s.config.recipe_for("drafter"))
        out_dir = folder_paths.get_output_directory()
        folder, name, counter, subfolder, _ = folder_paths.get_save_image_path(self.o.filename_prefix, out_dir)
        os.makedirs(folder, exist_ok=True)
        stem = os.path.join(folder, f"{name}_{counter:05}_report")
        text = report.to_json()
        with open(stem + ".json", "w", encoding="utf-8") as f:
            f.write(text)
        plot = render_report_plot(report)
        plot.save(stem + ".png")
        rel = "/".join(p for p in (subfolder.replace(os.sep, "/"), f"{name}_{counter:05}_report") if p)
        paths = f"report: output/{rel}.json and output/{rel}.png"
        LOG.info("SDVG: %s", paths)
        table = f"{paths}\n{report.table()}"
        self.show(table)
        made = self.base.process_latent_out(out.clone()).to("cpu", torch.float32)
        _REPORTS.append((made, {"table": table, "json": text, "plot": plot}))
        del _REPORTS[:-KEPT_REPORTS]


def report_of(latent: torch.Tensor) -> dict | None:
    """The report of the newest kept run that made `latent` (equal values to MATCH_TOLERANCE), else None."""
    latent = latent.detach().to("cpu", torch.float32)
    for made, report in reversed(_REPORTS):
        if made.shape == latent.shape and torch.allclose(made, latent, rtol=MATCH_TOLERANCE, atol=MATCH_TOLERANCE):
            return report
    return None


def running_node() -> str | None:
    """The node executing now (SamplerCustomAdvanced while it samples), or None outside an execution."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return None
    ctx = get_executing_context()
    node = getattr(ctx, "node_id", None) if ctx is not None else None
    return None if node is None else str(node).rsplit(".", 1)[-1]


def show_text_on(node_id: str, text: str) -> None:
    """Text drawn on a node (PromptServer.send_progress_text, where the host has it); display only, never fails."""
    try:
        from server import PromptServer
    except ImportError:
        return
    server = getattr(PromptServer, "instance", None)
    if server is None or not hasattr(server, "send_progress_text"):
        return
    try:
        server.send_progress_text(text, node_id)
    except Exception as e:  # display only
        LOG.debug("SDVG: progress text not sent: %s", e)
