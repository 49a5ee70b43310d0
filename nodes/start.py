"""SDVG Start: the inputs that define a generation (shared with SDVG Generate) and the empty state they make."""
from __future__ import annotations

from comfy_api.latest import io, ui

from ..sdvg_core.engine.engine import EngineConfig
from ..sdvg_core.engine.recipes import RECIPE_NAMES, recipe_by_name
from ..sdvg_core.engine.prompts import PromptSchedule as CoreSchedule  # the node value below is nodes' own
from ..sdvg_core.engine.state import GenerationSpec, PromptConditioning
from ..sdvg_core.io.text import fit_text_len
from . import shared_memo
from .conditioning import conditioning_embeddings
from .errors import SDVGError
from .hosted_dit import DiTHandle
from .hosted_scorer import HostedScorer
from .hosted_vae import host_vae
from .run_state import Run
from .schedule import PromptSchedule
from .session import Session
from .types import CATEGORY, SDVGModel, SDVGReward, SDVGSchedule, SDVGState
from .ui_text import show_text

RECIPES = list(RECIPE_NAMES)
AUTO = "auto"
ROLE_RECIPES = [AUTO, *RECIPE_NAMES]
MAX_BLOCKS = 10_000  # the widget's bound only (~2 h at 16 fps): the engine and the krea/longlive recipes have none
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
        io.Conditioning.Input("positive", optional=True,
                              tooltip="umT5 prompt embeddings: CLIP Text Encode with a 'wan' CLIP loader, or SDVG "
                                      "Load Prompt Embeddings. Leave it unconnected when 'schedule' is connected."),
        SDVGSchedule.Input("schedule", optional=True,
                           tooltip="A prompt schedule (SDVG Prompt Schedule / SDVG Prompt From Block): each block is "
                                   "generated, committed and scored under its own prompt; replaces 'positive' and "
                                   "'prompt'."),
        io.String.Input("prompt", multiline=True, default="",
                        tooltip="The prompt text ImageReward compares the frames with (the same text you encoded). "
                                "Empty: taken from SDVG Load Prompt Embeddings' conditioning when it carries it."),
        io.Int.Input("width", default=832, min=16, max=4096, step=16, tooltip="Video width in pixels (multiple of 16)."),
        io.Int.Input("height", default=480, min=16, max=4096, step=16, tooltip="Video height in pixels (multiple of 16)."),
        io.Int.Input("num_blocks", default=9, min=1, max=MAX_BLOCKS,
                     tooltip="Blocks of 3 latent frames (9 blocks = 27 latent frames = 105 video frames, 6.6 s at 16 fps; "
                             "160 blocks = 1917 frames, 2 min). Past 9 blocks use a recipe that runs at any length "
                             "(krea, longlive) and turn save_video on (SDVG Generate / SDVG Finish): the video is then written as blocks commit "
                             "instead of all its frames sitting in memory as IMAGE."),
        io.Int.Input("seed", default=42, min=0, max=0xFFFFFFFFFFFFFFFF, control_after_generate=True,
                     tooltip="Noise seed; drafter and target share each block's noise."),
        io.Combo.Input("recipe", options=RECIPES, default="krea",
                       tooltip="Context recipe of both models (unless drafter_recipe / target_recipe say otherwise). "
                               "krea: the published SDVG setup (rebuilds a short KV context every block; any length). "
                               "self_forcing: Self-Forcing's growing KV cache (at most 21 latent frames). longlive: "
                               "LongLive's frame sink + sliding window (flat cost, any length). longlive_infinity: "
                               "its variant with slot-relative positions."),
        io.Combo.Input("drafter_recipe", options=ROLE_RECIPES, default=AUTO,
                       tooltip="The drafter's own context recipe. auto: the recipe its kind was trained for "
                               "(SDVG Load Drafter kind longlive: longlive), else 'recipe'."),
        io.Combo.Input("target_recipe", options=ROLE_RECIPES, default=AUTO,
                       tooltip="The target's own context recipe. auto: 'recipe'. The target-only baseline in the "
                               "report is counted with it."),
        io.Combo.Input("decode_rule", options=DECODE_RULES, default="standard",
                       tooltip="VAE streaming rule. standard: equals ComfyUI's VAE Decode. krea: Krea's VAE cache rule, "
                               "to reproduce the published numbers."),
        io.Float.Input("cache_gb", default=shared_memo.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                       tooltip="Memory kept for big reusable caches (KV and VAE decoder caches) shared by all SDVG "
                               "nodes, so re-queueing after moving tau recomputes only from the first changed block. "
                               "Small results (drafts, blocks, scores) have their own 1 GB."),
    ]


def role_recipes(what: str, recipe: str, drafter_recipe: str, target_recipe: str,
                 drafter: DiTHandle | None) -> dict[str, str]:
    """The recipe name each model runs: its own setting, else (auto) the drafter kind's own, else `recipe`."""
    for name, value, options in (("recipe", recipe, RECIPES), ("drafter_recipe", drafter_recipe, ROLE_RECIPES),
                                 ("target_recipe", target_recipe, ROLE_RECIPES)):
        if value not in options:
            raise SDVGError(f"{what}: {name} must be one of {options}, got {value!r}")
    own = drafter.own_recipe if drafter is not None else None
    return {"drafter": drafter_recipe if drafter_recipe != AUTO else (own or recipe),
            "target": target_recipe if target_recipe != AUTO else recipe}


def prompt_schedule(what: str, positive, prompt: str, schedule: PromptSchedule | None,
                    text_len: int) -> list[tuple[int, PromptConditioning]]:
    """[(first block, prompt conditioning), ...] from a single conditioning (+ its text) or a schedule."""
    if schedule is not None:
        if positive is not None:
            raise SDVGError(f"{what}: both 'positive' and 'schedule' are connected; a schedule holds every prompt "
                            f"(block 0's too): disconnect 'positive'")
        if prompt.strip():
            raise SDVGError(f"{what}: 'prompt' is filled but a schedule is connected, whose entries carry their own "
                            f"texts (ImageReward scores each block against its entry's): clear 'prompt'")
        return [(i.first_block, PromptConditioning.make(i.text, fit_text_len(i.embeddings, text_len)))
                for i in schedule.items]
    if positive is None:
        raise SDVGError(f"{what}: connect 'positive' (CLIP Text Encode or SDVG Load Prompt Embeddings) or 'schedule' "
                        f"(SDVG Prompt Schedule)")
    emb, carried = conditioning_embeddings(positive)
    return [(0, PromptConditioning.make(prompt.strip() or carried, fit_text_len(emb, text_len)))]


def start_run(what: str, target: DiTHandle, vae, positive, prompt: str, width: int, height: int,
              num_blocks: int, seed: int, recipe: str, decode_rule: str, cache_gb: float,
              drafter: DiTHandle | None = None, image_reward: HostedScorer | None = None,
              schedule: PromptSchedule | None = None, drafter_recipe: str = AUTO, target_recipe: str = AUTO) -> Run:
    """Validate the inputs and make the first (empty) state: the prompt schedule becomes part of the spec, each
    model's recipe part of the engine config, and ComfyUI's reservation is sized for both."""
    if decode_rule not in DECODE_RULES:
        raise SDVGError(f"{what}: decode_rule must be one of {DECODE_RULES}, got {decode_rule!r}")
    names = role_recipes(what, recipe, drafter_recipe, target_recipe, drafter)
    shared_memo.set_cache_budget(cache_gb)
    try:
        entries = prompt_schedule(what, positive, prompt, schedule, target.runner.cfg.text_len)
        config = EngineConfig(recipe=recipe_by_name(recipe), decode_rule=decode_rule,
                              drafter_recipe=recipe_by_name(names["drafter"]),
                              target_recipe=recipe_by_name(names["target"]))
        session = Session(target, drafter, host_vae(vae), image_reward, config)
        spec = GenerationSpec(CoreSchedule.of(entries), width, height, num_blocks, seed)
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
    if scorer and not all(p.text for _, p in run.state.spec.schedule):
        raise SDVGError(f"{what}: ImageReward needs the prompt text; fill SDVG Start's 'prompt' (the text you encoded)")
    if run.state.done:
        raise SDVGError(f"{what}: all {run.state.spec.num_blocks} blocks are already committed")


def steps_per_block(run: Run, role: str | None = None) -> int:
    """Model calls per block of one role's recipe (None: the larger of the two, for a bar over both)."""
    config = run.session.config
    return max(config.recipe_for(r).plan.num_steps for r in ((role,) if role else ("drafter", "target")))


def describe_start(run: Run) -> str:
    """What SDVG Start shows: size, frames, seed, each model's recipe, the prompt schedule."""
    spec, config = run.state.spec, run.session.config
    frames = run.session.vae.config.pixel_frames(spec.num_latent_frames)
    text = (f"{spec.num_blocks} blocks x {spec.frames_per_block} latent frames -> {frames} frames at "
            f"{spec.width}x{spec.height}, seed {spec.seed}, recipes: drafter {config.recipe_for('drafter').name}, "
            f"target {config.recipe_for('target').name}")
    if spec.schedule.switches:
        text += "\nprompts: " + "; ".join(f"block {b}: {p.text[:50]!r}" for b, p in spec.schedule)
    return text


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
    def execute(cls, target, vae, positive=None, prompt="", width=832, height=480, num_blocks=9, seed=42,
                recipe="krea", decode_rule="standard", cache_gb=shared_memo.DEFAULT_CACHE_GB, drafter=None,
                image_reward=None, schedule=None, drafter_recipe=AUTO, target_recipe=AUTO) -> io.NodeOutput:
        run = start_run("SDVG Start", target, vae, positive, prompt, width, height, num_blocks, seed, recipe,
                        decode_rule, cache_gb, drafter, image_reward, schedule, drafter_recipe, target_recipe)
        text = describe_start(run)
        show_text(text)
        return io.NodeOutput(run, ui=ui.PreviewText(text))
