"""The per-block operations of the step-by-step loop: draft, decode the draft, score it, route (commit) the block."""
from __future__ import annotations

from comfy_api.latest import io, ui

from ..sdvg_core.engine.policy import DEFAULT_TAU
from ..sdvg_core.engine.policy_names import TAU_SLIDER
from .outputs import StepProgress, image_output
from .session import Run, block_steps, engine_errors, need, node_policy
from .surface import CAT_STEPS, SDVGError, SDVGState, show_text


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
    def execute(cls, state: Run) -> io.NodeOutput:
        need("SDVG Draft Block", state.session, state.state.spec, drafter=True)
        engine = state.session.engine()
        engine.callbacks.progress = StepProgress(block_steps(engine, state.state.spec, "drafter"))
        with engine_errors("SDVG Draft Block"):
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
    def execute(cls, state: Run) -> io.NodeOutput:
        with engine_errors("SDVG Decode Draft"):
            new = state.session.engine().decode_draft(state.state)
        frames = image_output(new.pending.frames)
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
    def execute(cls, state: Run) -> io.NodeOutput:
        need("SDVG ImageReward Score", state.session, state.state.spec, scorer=True)
        with engine_errors("SDVG ImageReward Score"):
            new = state.session.engine().score_draft(state.state)
        scores = new.pending.frame_scores
        text = f"block {new.next_block}: min {min(scores):+.3f} | frames " + " ".join(f"{s:+.3f}" for s in scores)
        show_text(text)
        return io.NodeOutput(state.with_state(new), float(min(scores)), text, ui=ui.PreviewText(text))


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
                io.Float.Input("tau", default=DEFAULT_TAU, min=TAU_SLIDER[0], max=TAU_SLIDER[1], step=0.01,
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
        return ["scored"] if node_policy("SDVG Route", "sdvg", tau, force_reject_first).needs_score(state.state.next_block) else []

    @classmethod
    def execute(cls, state: Run, tau: float, force_reject_first: bool, scored: Run | None = None) -> io.NodeOutput:
        policy = node_policy("SDVG Route", "sdvg", tau, force_reject_first)
        b = state.state.next_block
        base = state.state
        if scored is not None and policy.needs_score(b):
            if scored.state.lineage != base.lineage or scored.state.next_block != b:
                raise SDVGError(f"SDVG Route: the 'scored' input is not the draft of this block ({b}); connect "
                                f"the SDVG ImageReward Score whose chain starts from the same state as 'state'")
            base = scored.state
        if policy.needs_score(b) and (base.pending is None or base.pending.frame_scores is None):
            need("SDVG Route", state.session, state.state.spec, drafter=True, scorer=True)
        elif not policy.forced(b):
            need("SDVG Route", state.session, state.state.spec, drafter=True)
        engine = state.session.engine()
        engine.callbacks.progress = StepProgress(block_steps(engine, state.state.spec))
        with engine_errors("SDVG Route"):
            new = engine.route(base, policy)
        rec = new.blocks[-1]
        score = "-" if rec.score is None else f"{rec.score:+.3f}"
        text = f"block {b}: {rec.decision} -> {rec.producer} (min score {score}, tau {tau:+.2f})"
        spec = new.spec
        if spec.schedule.switches:  # a schedule: which prompt the block was generated and scored under
            text += f", prompt {spec.segment_of(b)}: {spec.prompt_at(b).text[:60]!r}"
        show_text(text)
        return io.NodeOutput(state.with_state(new, policy), text,
                             ui=ui.PreviewText(text))
