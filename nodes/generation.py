"""Generation nodes: start, the per-block operations (draft, decode, score, route), finish, all-in-one generate."""
from __future__ import annotations

import math
import time

import torch
from comfy_api.latest import io, ui

import comfy.model_management as mm
import comfy.utils

from ..sdvg_core.engine.engine import EngineConfig, ProgressEvent
from ..sdvg_core.engine.memo import TieredMemo
from ..sdvg_core.engine.plot import render_report_plot
from ..sdvg_core.engine.policy import DEFAULT_TAU, DraftOnly, TargetOnly, ThresholdPolicy
from ..sdvg_core.engine.recipes import recipe_by_name
from ..sdvg_core.engine.report import build_report
from ..sdvg_core.engine.state import GenerationSpec, PromptConditioning
from ..sdvg_core.io.text import fit_text_len
from . import host
from .types import CAT_STEPS, CATEGORY, SDVGModel, SDVGReward, SDVGState

RECIPES = ["krea", "self_forcing"]
DECODE_RULES = ["standard", "krea"]
POLICIES = ["sdvg", "target_only", "draft_only"]
WAN_FPS = 16


# ------------------------------------------------------------------------------------------------ shared inputs
def run_inputs() -> list:
    """Inputs that define a generation (SDVG Start and SDVG Generate)."""
    return [
        SDVGModel.Input("target", tooltip="The 14B target (SDVG Load Target): makes block 0 and redoes rejected blocks."),
        SDVGModel.Input("drafter", optional=True,
                        tooltip="The 1.3B drafter (SDVG Load Drafter): proposes every block. Not needed for target-only."),
        SDVGReward.Input("image_reward", optional=True,
                         tooltip="ImageReward (SDVG Load ImageReward): scores each draft. Needed when tau decides."),
        io.Vae.Input("vae", tooltip="The Wan 2.1 VAE from ComfyUI's Load VAE (wan_2.1_vae.safetensors)."),
        io.Conditioning.Input("positive", tooltip="umT5 prompt embeddings: CLIP Text Encode with a 'wan' CLIP loader, "
                                                  "or SDVG Load Prompt Embeddings."),
        io.String.Input("prompt", multiline=True, default="",
                        tooltip="The prompt text ImageReward compares the frames with (the same text you encoded). "
                                "Empty: taken from SDVG Load Prompt Embeddings' conditioning when it carries it."),
        io.Int.Input("width", default=832, min=16, max=4096, step=16, tooltip="Video width in pixels (multiple of 16)."),
        io.Int.Input("height", default=480, min=16, max=4096, step=16, tooltip="Video height in pixels (multiple of 16)."),
        io.Int.Input("num_blocks", default=9, min=1, max=128,
                     tooltip="Blocks of 3 latent frames (9 blocks = 27 latent frames = 105 video frames, 6.6 s at 16 fps)."),
        io.Int.Input("seed", default=42, min=0, max=0xFFFFFFFFFFFFFFFF, control_after_generate=True,
                     tooltip="Noise seed; drafter and target share each block's noise."),
        io.Combo.Input("recipe", options=RECIPES, default="krea",
                       tooltip="Context recipe. krea: the published SDVG setup (rebuilds a 3-frame KV context per "
                               "block). self_forcing: Self-Forcing's growing KV cache."),
        io.Combo.Input("decode_rule", options=DECODE_RULES, default="standard",
                       tooltip="VAE streaming rule. standard: equals ComfyUI's VAE Decode. krea: Krea's VAE cache rule, "
                               "to reproduce the published numbers."),
        io.Float.Input("cache_gb", default=host.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                       tooltip="Memory kept for big reusable caches (KV and VAE decoder caches) shared by all SDVG "
                               "nodes, so re-queueing after moving tau recomputes only from the first changed block. "
                               "Small results (drafts, blocks, scores) have their own 1 GB."),
    ]


def start_run(what: str, target: host.DiTHandle, vae, positive, prompt: str, width: int, height: int,
              num_blocks: int, seed: int, recipe: str, decode_rule: str, cache_gb: float,
              drafter: host.DiTHandle | None = None, image_reward: host.HostedScorer | None = None) -> host.Run:
    """Validate the inputs and make the first (empty) state."""
    if recipe not in RECIPES or decode_rule not in DECODE_RULES:
        raise host.SDVGError(f"{what}: recipe must be one of {RECIPES} and decode_rule one of {DECODE_RULES}")
    host.set_cache_budget(cache_gb)
    emb, carried = host.conditioning_embeddings(positive)
    text = prompt.strip() or carried
    config = EngineConfig(recipe=recipe_by_name(recipe), decode_rule=decode_rule)
    session = host.Session(target, drafter, host.host_vae(vae), image_reward, config)
    try:
        cond = PromptConditioning.make(text, fit_text_len(emb, target.runner.cfg.text_len))
        spec = GenerationSpec(cond, width, height, num_blocks, seed)
        session.reserve(spec)  # size ComfyUI's reservation for this window; refuse sizes that cannot fit
        state = session.engine().start(spec)
    except ValueError as e:
        raise host.SDVGError(f"{what}: {e}") from e
    return host.Run(session, state)


def _need(run: host.Run, what: str, drafter: bool = False, scorer: bool = False) -> None:
    s = run.session
    if drafter and s.drafter is None:
        raise host.SDVGError(f"{what}: no drafter; connect SDVG Load Drafter to the 'drafter' input of SDVG Start")
    if scorer and s.scorer is None:
        raise host.SDVGError(f"{what}: no ImageReward; connect SDVG Load ImageReward to the 'image_reward' input of SDVG Start")
    if scorer and not run.state.spec.prompt.text:
        raise host.SDVGError(f"{what}: ImageReward needs the prompt text; fill SDVG Start's 'prompt' (the text you encoded)")
    if run.state.done:
        raise host.SDVGError(f"{what}: all {run.state.spec.num_blocks} blocks are already committed")


class _StepProgress:
    """Progress bar over one node's model calls; a committed block adds its last frame as preview."""

    def __init__(self, steps: int):
        self.steps = steps
        self.bar = comfy.utils.ProgressBar(steps)

    def __call__(self, ev: ProgressEvent) -> None:
        if ev.kind == "step":
            self.bar.update_absolute(min(ev.step, self.steps), self.steps)
        elif ev.preview is not None:
            self.bar.update_absolute(self.steps, self.steps, ("JPEG", host.to_pil(ev.preview), 512))


def _steps(run: host.Run) -> int:
    return run.session.config.recipe.plan.num_steps


def _out(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(mm.intermediate_device(), torch.float32)


# ------------------------------------------------------------------------------------------------ nodes
class SDVGStart(io.ComfyNode):
    """Makes the empty generation state the per-block nodes and the loop work on."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGStart", display_name="SDVG Start", category=CATEGORY,
            description="Sets up a speculative generation: models, VAE, prompt, size, number of blocks, seed.",
            inputs=run_inputs(),
            outputs=[SDVGState.Output(display_name="state", tooltip="the empty state (no block committed yet)")],
        )

    @classmethod
    def execute(cls, target, vae, positive, prompt, width, height, num_blocks, seed, recipe, decode_rule, cache_gb,
                drafter=None, image_reward=None) -> io.NodeOutput:
        run = start_run("SDVG Start", target, vae, positive, prompt, width, height, num_blocks, seed, recipe,
                        decode_rule, cache_gb, drafter, image_reward)
        spec = run.state.spec
        frames = run.session.vae.config.pixel_frames(spec.num_latent_frames)
        text = (f"{spec.num_blocks} blocks x {spec.frames_per_block} latent frames -> {frames} frames at "
                f"{spec.width}x{spec.height}, seed {spec.seed}, recipe {recipe}")
        host.show_text(text)
        return io.NodeOutput(run, ui=ui.PreviewText(text))


class SDVGDraftBlock(io.ComfyNode):
    """The drafter proposes the next block."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGDraftBlock", display_name="SDVG Draft Block", category=CAT_STEPS,
            description="The 1.3B drafter denoises the next block from its noise (the target would start from the same noise).",
            inputs=[SDVGState.Input("state", tooltip="state before the block (from SDVG Loop Start or SDVG Start)")],
            outputs=[SDVGState.Output(display_name="state", tooltip="the state with the pending draft")],
        )

    @classmethod
    def execute(cls, state: host.Run) -> io.NodeOutput:
        _need(state, "SDVG Draft Block", drafter=True)
        engine = state.session.engine(_StepProgress(_steps(state)))
        return io.NodeOutput(state.with_state(engine.draft(state.state)))


class SDVGDecodeBlock(io.ComfyNode):
    """VAE-decodes the pending draft without touching the committed decoder cache."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGDecodeBlock", display_name="SDVG Decode Draft", category=CAT_STEPS,
            description="Decodes the pending draft to frames, continuing the committed VAE cache on a copy "
                        "(a rejected draft leaves no trace).",
            inputs=[SDVGState.Input("state", tooltip="state with a pending draft (from SDVG Draft Block)")],
            outputs=[SDVGState.Output(display_name="state", tooltip="the state with the draft's frames"),
                     io.Image.Output(display_name="frames", tooltip="the draft's frames (preview)")],
        )

    @classmethod
    def execute(cls, state: host.Run) -> io.NodeOutput:
        if state.state.pending is None or state.state.pending.latents is None:
            raise host.SDVGError("SDVG Decode Draft: no pending draft; connect the output of SDVG Draft Block")
        new = state.session.engine().decode_draft(state.state)
        frames = _out(new.pending.frames)
        return io.NodeOutput(state.with_state(new), frames, ui=ui.PreviewImage(frames, cls=cls))


class SDVGScoreBlock(io.ComfyNode):
    """ImageReward scores every frame of the decoded draft; the block score is the minimum."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGScoreBlock", display_name="SDVG ImageReward Score", category=CAT_STEPS,
            description="Scores each decoded draft frame against the prompt with ImageReward; the block's score is "
                        "the minimum over its frames (one bad frame must not hide behind good ones).",
            inputs=[SDVGState.Input("state", tooltip="state with decoded draft frames (from SDVG Decode Draft)")],
            outputs=[SDVGState.Output(display_name="state", tooltip="the state with the draft's scores"),
                     io.Float.Output(display_name="min_score", tooltip="the block score (min over frames)"),
                     io.String.Output(display_name="frame_scores", tooltip="every frame's ImageReward score")],
        )

    @classmethod
    def execute(cls, state: host.Run) -> io.NodeOutput:
        _need(state, "SDVG ImageReward Score", scorer=True)
        if state.state.pending is None or state.state.pending.frames is None:
            raise host.SDVGError("SDVG ImageReward Score: no decoded draft; connect the state output of SDVG Decode Draft")
        new = state.session.engine().score_draft(state.state)
        scores = new.pending.frame_scores
        text = f"block {new.next_block}: min {min(scores):+.3f} | frames " + " ".join(f"{s:+.3f}" for s in scores)
        host.show_text(text)
        return io.NodeOutput(state.with_state(new), float(min(scores)), text, ui=ui.PreviewText(text))


def _policy(tau: float, force_reject_first: bool) -> ThresholdPolicy:
    return ThresholdPolicy(tau=float(tau), aggregation="min", force_reject_first=bool(force_reject_first))


class SDVGRoute(io.ComfyNode):
    """Keeps the draft when its min score >= tau, else the target regenerates the block from the same noise."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGRoute", display_name="SDVG Route", category=CAT_STEPS,
            description="Commits the block: the draft if its min-frame score >= tau, otherwise the target's block "
                        "made from the same noise. A forced block (block 0) never evaluates the draft/score inputs.",
            inputs=[
                SDVGState.Input("state", tooltip="state before the block (from SDVG Loop Start or SDVG Start)"),
                SDVGState.Input("scored", optional=True, lazy=True,
                                tooltip="the same block after SDVG Draft -> Decode -> Score; evaluated only when the "
                                        "decision needs a score (never for a forced block 0). Unconnected: the "
                                        "route node drafts, decodes and scores itself."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=-5.0, max=5.0, step=0.01,
                               display_mode=io.NumberDisplay.slider,
                               tooltip="Quality/speed knob: accept a draft when its min ImageReward >= tau. Higher = more "
                                       "blocks from the 14B (slower, closer to target quality). Paper: -0.7 gives 1.59x."),
                io.Boolean.Input("force_reject_first", default=True,
                                 tooltip="Block 0 always comes from the target (it fixes the scene composition); "
                                         "its draft is never computed."),
            ],
            outputs=[SDVGState.Output(display_name="state", tooltip="the state with the block committed"),
                     io.String.Output(display_name="decision", tooltip="what was decided and why")],
        )

    @classmethod
    def check_lazy_status(cls, state=None, tau=DEFAULT_TAU, force_reject_first=True, **lazy) -> list[str]:
        # 'scored' is in `lazy` only when connected (None until evaluated); never ask for an unconnected input
        if state is None or state.state.done or "scored" not in lazy or lazy["scored"] is not None:
            return []
        return ["scored"] if _policy(tau, force_reject_first).needs_score(state.state.next_block) else []

    @classmethod
    def execute(cls, state: host.Run, tau: float, force_reject_first: bool, scored: host.Run | None = None) -> io.NodeOutput:
        if state.state.done:
            raise host.SDVGError("SDVG Route: all blocks are already committed")
        policy = _policy(tau, force_reject_first)
        b = state.state.next_block
        base = state.state
        if scored is not None and policy.needs_score(b):
            if scored.state.lineage != base.lineage or scored.state.next_block != b:
                raise host.SDVGError(f"SDVG Route: the 'scored' input is not the draft of this block ({b}); connect "
                                     f"the SDVG ImageReward Score whose chain starts from the same state as 'state'")
            base = scored.state
        if policy.needs_score(b) and (base.pending is None or base.pending.frame_scores is None):
            _need(state, "SDVG Route", drafter=True, scorer=True)
        elif not policy.forced(b):
            _need(state, "SDVG Route", drafter=True)
        engine = state.session.engine(_StepProgress(_steps(state)))
        new = engine.route(base, policy)
        rec = new.blocks[-1]
        score = "-" if rec.score is None else f"{rec.score:+.3f}"
        text = f"block {b}: {rec.decision} -> {rec.producer} (min score {score}, tau {tau:+.2f})"
        host.show_text(text)
        return io.NodeOutput(state.with_state(new, tau=float(tau), policy=policy.describe()), text,
                             ui=ui.PreviewText(text))


def _report(run: host.Run, wall: float | None):
    s = run.session
    meta = {"target": s.target.info, "drafter": s.drafter.info if s.drafter else "-",
            "image_reward": s.scorer.info if s.scorer else "-", "lineage": run.state.lineage,
            "frames": str(s.vae.config.pixel_frames(len(run.state.blocks) * run.state.spec.frames_per_block))}
    return build_report(run.state, run.policy or "-", s.config.recipe, _steps(run), wall_seconds=wall, meta=meta,
                        run_id=host.current_run_id())


def _finish_outputs(run: host.Run, wall: float | None):
    engine = run.session.engine()
    frames = _out(engine.frames(run.state))
    report = _report(run, wall)
    tau = run.tau if run.tau is not None and math.isfinite(run.tau) else None
    plot = host.to_image_batch(render_report_plot(report, tau))
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
            outputs=[io.Image.Output(display_name="frames", tooltip="all frames, 0..1, 16 fps"),
                     io.String.Output(display_name="report", tooltip="per-block table: producer, decision, scores, forwards"),
                     io.Image.Output(display_name="plot", tooltip="min score per block, tau line, bars coloured by producer"),
                     io.String.Output(display_name="report_json", tooltip="the same report as JSON")],
        )

    @classmethod
    def execute(cls, state: host.Run) -> io.NodeOutput:
        if not state.state.blocks:
            raise host.SDVGError("SDVG Finish: no block committed; connect the state output of SDVG Loop End")
        frames, table, plot, js = _finish_outputs(state, None)
        host.show_text(table)
        return io.NodeOutput(frames, table, plot, js, ui=ui.PreviewText(table))


class SDVGGenerate(io.ComfyNode):
    """All in one: the whole speculative loop in one node, with progress and a preview per block."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="SDVGGenerate", display_name="SDVG Generate (all-in-one)", category=CATEGORY,
            description="Generates the whole video: per block the drafter proposes, ImageReward scores the frames, "
                        "and the target redoes the block when the min score < tau (block 0 always from the target).",
            inputs=run_inputs()[:10] + [
                io.Combo.Input("policy", options=POLICIES, default="sdvg",
                               tooltip="sdvg: route by tau. target_only: the 14B makes every block (baseline). "
                                       "draft_only: keep every draft (block 0 from the target if force_reject_first)."),
                io.Float.Input("tau", default=DEFAULT_TAU, min=-5.0, max=5.0, step=0.01, display_mode=io.NumberDisplay.slider,
                               tooltip="Accept a draft when its min ImageReward >= tau (policy sdvg)."),
                io.Boolean.Input("force_reject_first", default=True,
                                 tooltip="Block 0 always comes from the target; its draft is never computed."),
            ] + run_inputs()[10:] + [
                io.Boolean.Input("fresh_run", default=False,
                                 tooltip="On: this node neither takes results from nor leaves them in the cache shared "
                                         "by SDVG nodes, so its wall time is a fresh run's (use it to compare times, "
                                         "e.g. target-only vs SDVG). Off: moving tau recomputes only from the first "
                                         "changed block."),
            ],
            outputs=[io.Image.Output(display_name="frames", tooltip="all frames, 0..1, 16 fps"),
                     io.String.Output(display_name="report", tooltip="per-block table: producer, decision, scores, forwards"),
                     io.Image.Output(display_name="plot", tooltip="min score per block, tau line, bars coloured by producer"),
                     io.String.Output(display_name="report_json", tooltip="the same report as JSON")],
        )

    @classmethod
    def execute(cls, target, vae, positive, prompt, width, height, num_blocks, seed, policy, tau, force_reject_first,
                recipe, decode_rule, cache_gb, fresh_run=False, drafter=None, image_reward=None) -> io.NodeOutput:
        what = "SDVG Generate"
        if policy not in POLICIES:
            raise host.SDVGError(f"{what}: policy must be one of {POLICIES}, got {policy!r}")
        run = start_run(what, target, vae, positive, prompt, width, height, num_blocks, seed, recipe, decode_rule,
                        cache_gb, drafter, image_reward)
        pol = {"sdvg": lambda: _policy(tau, force_reject_first), "target_only": TargetOnly,
               "draft_only": lambda: DraftOnly(force_reject_first=bool(force_reject_first))}[policy]()
        if policy != "target_only":
            _need(run, what, drafter=True, scorer=policy == "sdvg")
        # fresh_run: a private memo for this call only (nothing taken from or left for other nodes' runs)
        memo = TieredMemo(int(cache_gb * 2**30)) if fresh_run else None
        engine = run.session.engine(host.BlockProgress(num_blocks, _steps(run)), memo=memo)
        t0 = time.perf_counter()
        state = run.state
        while not state.done:
            state = engine.route(state, pol)
        run = run.with_state(state, tau=float(tau) if policy == "sdvg" else None, policy=pol.describe())
        frames, table, plot, js = _finish_outputs(run, time.perf_counter() - t0)
        host.show_text(table)
        return io.NodeOutput(frames, table, plot, js, ui=ui.PreviewText(table))
