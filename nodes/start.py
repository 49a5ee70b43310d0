"""SDVG Start: the inputs that define a generation (shared with SDVG Generate) and the empty state they make."""
from __future__ import annotations

from comfy_api.latest import io, ui

from ..sdvg_core.engine.engine import EngineConfig
from ..sdvg_core.engine.recipes import recipe_by_name
from ..sdvg_core.engine.state import GenerationSpec, PromptConditioning
from ..sdvg_core.io.text import fit_text_len
from . import shared_memo
from .conditioning import conditioning_embeddings
from .errors import SDVGError
from .hosted_dit import DiTHandle
from .hosted_scorer import HostedScorer
from .hosted_vae import host_vae
from .run_state import Run
from .session import Session
from .types import CATEGORY, SDVGModel, SDVGReward, SDVGState
from .ui_text import show_text

RECIPES = ["krea", "self_forcing"]
DECODE_RULES = ["standard", "krea"]


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
        io.Float.Input("cache_gb", default=shared_memo.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                       tooltip="Memory kept for big reusable caches (KV and VAE decoder caches) shared by all SDVG "
                               "nodes, so re-queueing after moving tau recomputes only from the first changed block. "
                               "Small results (drafts, blocks, scores) have their own 1 GB."),
    ]


def start_run(what: str, target: DiTHandle, vae, positive, prompt: str, width: int, height: int,
              num_blocks: int, seed: int, recipe: str, decode_rule: str, cache_gb: float,
              drafter: DiTHandle | None = None, image_reward: HostedScorer | None = None) -> Run:
    """Validate the inputs and make the first (empty) state."""
    if recipe not in RECIPES or decode_rule not in DECODE_RULES:
        raise SDVGError(f"{what}: recipe must be one of {RECIPES} and decode_rule one of {DECODE_RULES}")
    shared_memo.set_cache_budget(cache_gb)
    emb, carried = conditioning_embeddings(positive)
    text = prompt.strip() or carried
    config = EngineConfig(recipe=recipe_by_name(recipe), decode_rule=decode_rule)
    session = Session(target, drafter, host_vae(vae), image_reward, config)
    try:
        cond = PromptConditioning.make(text, fit_text_len(emb, target.runner.cfg.text_len))
        spec = GenerationSpec(cond, width, height, num_blocks, seed)
        session.reserve(spec)  # size ComfyUI's reservation for this window; refuse sizes that cannot fit
        state = session.engine().start(spec)
    except ValueError as e:
        raise SDVGError(f"{what}: {e}") from e
    return Run(session, state)


def need(run: Run, what: str, drafter: bool = False, scorer: bool = False) -> None:
    """Refuse an operation whose models or inputs are missing, naming what to connect."""
    s = run.session
    if drafter and s.drafter is None:
        raise SDVGError(f"{what}: no drafter; connect SDVG Load Drafter to the 'drafter' input of SDVG Start")
    if scorer and s.scorer is None:
        raise SDVGError(f"{what}: no ImageReward; connect SDVG Load ImageReward to the 'image_reward' input of SDVG Start")
    if scorer and not run.state.spec.prompt.text:
        raise SDVGError(f"{what}: ImageReward needs the prompt text; fill SDVG Start's 'prompt' (the text you encoded)")
    if run.state.done:
        raise SDVGError(f"{what}: all {run.state.spec.num_blocks} blocks are already committed")


def steps_per_block(run: Run) -> int:
    return run.session.config.recipe.plan.num_steps


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
        show_text(text)
        return io.NodeOutput(run, ui=ui.PreviewText(text))
