"""A run built from node inputs: SDVG Start's and SDVG Generate's inputs, the Session (models, VAE, scorer, engine
options) they make, the SDVG_STATE value (`Run`) the per-block nodes pass on, and the execution ids its blocks are
stamped with. Every rule about the request (sizes, recipes, decode rule, the schedule's shape) is sdvg_core's: its
ValueError becomes the node's message."""
from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

import comfy.model_management as mm
from comfy_api.latest import io

from ..sdvg_core.engine.config import AUTO, DECODE_RULES, EngineConfig
from ..sdvg_core.engine.engine import Engine, ProgressEvent
from ..sdvg_core.derived.memo import TieredMemo
from ..sdvg_core.engine.memory import MemoryEstimate, check_fits, estimate_for_spec
from ..sdvg_core.given.request import MODES, VIDEO_MODES, PixelInput, StartImage, VideoToVideo, describe
from ..sdvg_core.engine.policy import Policy
from ..sdvg_core.engine.policy_names import PolicyNameError, policy_by_name
from ..sdvg_core.engine.prompts import PromptSchedule
from ..sdvg_core.derived.digest import tensor_digest
from ..sdvg_core.engine.recipes import RECIPE_NAMES, recipe_by_name
from ..sdvg_core.engine.state import MAX_BLOCKS, MAX_FRAMES, GenerationSpec, GenerationState, PromptConditioning  # noqa: F401
from ..sdvg_core.io.text import cut_note, fit_text_len
from . import shared_memo
from .hosted import DiTHandle, HostedScorer, HostedVAE, host_vae, object_token
from .routing import HostedTAEHV, resolve as resolve_route
from .surface import SDVGError, SDVGModel, SDVGReward, SDVGSchedule, sentence

LOG = logging.getLogger("SDVG")

ROLE_RECIPES = [AUTO, *RECIPE_NAMES]  # a model's recipe: auto (EngineConfig.for_run's rule) or one of the recipes
STRENGTH_STEP = 0.05  # the strength widget's step (PIXELS_API)
FPS_MAX = 1000.0  # the fps input's bound (a frame rate no camera reaches)


# ------------------------------------------------------------------------------------------------ execution ids
_FALLBACK_RUN_ID = uuid.uuid4().hex


def current_run_id() -> str:
    """The id of the ComfyUI execution running now (its prompt id): every block a node computes is stamped with it,
    so SDVG Finish can tell blocks computed by this queue press from blocks taken from ComfyUI's node cache (an
    earlier press). Outside an execution (no context): one id per process."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return _FALLBACK_RUN_ID
    ctx = get_executing_context()
    pid = (getattr(ctx, "prompt_id", None) or getattr(ctx, "task_id", None)) if ctx is not None else None  # pip 0.12: task_id
    return str(pid) if pid else _FALLBACK_RUN_ID


def node_run_id() -> str:
    """The run id of a generation made inside one node (SDVG Generate): the execution's id and the node's, so what
    this node takes from another node's generation in the same execution counts as reused, not as its own work."""
    try:
        from comfy_execution.utils import get_executing_context
    except ImportError:
        return current_run_id()
    ctx = get_executing_context()
    node = getattr(ctx, "node_id", None) if ctx is not None else None
    return f"{current_run_id()}#{node}" if node is not None else current_run_id()


# ------------------------------------------------------------------------------------------------ session and run
@dataclass(frozen=True)
class Session:
    """Everything a generation needs besides its state: models, VAE, scorer, engine options. Its DiTs are this run's
    views of the loaded models (`DiTHandle.for_run`): sizing their calls for this run changes no other graph's."""

    target: DiTHandle
    drafter: DiTHandle | None
    vae: HostedVAE
    scorer: HostedScorer | None
    config: EngineConfig
    route_vae: HostedTAEHV | None = None  # a tiny routing decoder (routing.py); None: the VAE routes

    def __post_init__(self):
        object.__setattr__(self, "target", self.target.for_run())
        if self.drafter is not None:
            object.__setattr__(self, "drafter", self.drafter.for_run())

    def engine(self, progress: Callable[[ProgressEvent], None] | None = None, memo: TieredMemo | None = None,
               run_id: str | None = None) -> Engine:
        """A light Engine over the shared memo (or `memo`: a private one for a fresh run), with ComfyUI's Cancel as
        interrupt callback and the current execution's id as run id (or `run_id`)."""
        e = Engine(self.target.dit, self.vae, self.drafter.dit if self.drafter else None, self.scorer,
                   self.config, memo=shared_memo.MEMO if memo is None else memo, route_vae=self.route_vae)
        e.callbacks.interrupt = mm.throw_exception_if_processing_interrupted
        e.callbacks.progress = progress
        e.callbacks.run_id = run_id or current_run_id()
        return e

    def reserve(self, spec: GenerationSpec) -> MemoryEstimate:
        """Size each DiT's per-call reservation for its recipe's window and this size (on this run's views), and
        refuse, before any work, a size whose estimated peak exceeds the device's memory (MemoryRefused names the
        estimate and the limit). Weights of ComfyUI-managed MODELs are not counted (ComfyUI can stream them)."""
        handles = [h for h in (self.target, self.drafter) if h is not None]
        vae = getattr(self.vae, "inner", self.vae)  # a HostedVAE's network (NoVAE: a run that decodes nothing)
        weights = mm.module_size(vae) if isinstance(vae, torch.nn.Module) else 0
        # each DiT is sized for its own recipe (e.g. a LongLive drafter's window next to a Krea target's rebuild)
        est = estimate_for_spec(spec, [self.config.recipe_for(h.role) for h in handles],
                                [(h.dit.cfg, h.dit.dtype) for h in handles], vae.config, vae.dtype,
                                vae_weight_bytes=weights)
        for h, d in zip(handles, est.dits):
            h.dit.work_bytes = d.step
        counted = dataclasses.replace(est, dits=tuple(d if h.dit.full_load else dataclasses.replace(d, weights=0)
                                                      for h, d in zip(handles, est.dits)))
        device = handles[0].dit.device
        total = getattr(mm, "get_total_memory", None)
        if total is not None:
            check_fits(counted, int(total(device)), f"{device} (ComfyUI's total for it)")
        LOG.info("SDVG memory estimate: %s", counted.describe())
        return counted


@dataclass(frozen=True)
class Run(tuple):
    """The SDVG_STATE value passed between nodes: the session plus an immutable GenerationState.

    As a tuple it is (state, the draft's decoded frames when it has them): ComfyUI's RAM-pressure output cache
    (0.33, `--cache-ram`) sizes a node output by the tensors it finds in lists and tuples, so the one large tensor a
    state holds outside the shared memo is counted for its bytes there (models and memo entries are ComfyUI's model
    management's; committed latents are memo entries every later state shares). The state comes first because that
    cache keeps, while its prompt runs, an output in which nothing lacks `is_dynamic()`: an empty tuple would be one."""

    session: Session
    state: GenerationState
    policy: Policy | None = None  # the policy of the last routing decision (the report's description and tau)

    def __new__(cls, session: Session, state: GenerationState, policy: Policy | None = None):
        frames = state.pending.frames if state.pending is not None else None
        return super().__new__(cls, (state,) if frames is None else (state, frames))

    def with_state(self, state: GenerationState, policy: Policy | None = None) -> "Run":
        return Run(self.session, state, policy if policy is not None else self.policy)


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """sdvg_core's ValueError (a request it refuses: what is wrong and the fix) as the node's message."""
    try:
        yield
    except ValueError as e:
        raise SDVGError(f"{what}: {sentence(e)}") from e


# ------------------------------------------------------------------------------------------------ node inputs
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
        io.Combo.Input("recipe", options=list(RECIPE_NAMES), default="krea",
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
        io.Combo.Input("decode_rule", options=list(DECODE_RULES), default="standard",
                       tooltip="VAE streaming rule. standard: equals ComfyUI's VAE Decode. krea: Krea's VAE cache rule, "
                               "to reproduce the published numbers."),
        io.Float.Input("cache_gb", default=shared_memo.DEFAULT_CACHE_GB, min=0.0, max=1024.0, step=0.5,
                       tooltip="Memory kept for big reusable caches (KV and VAE decoder caches) shared by all SDVG "
                               "nodes, so re-queueing after moving tau recomputes only from the first changed block. "
                               "Small results (drafts, blocks, scores) have their own 1 GB."),
    ]


def conditioning_embeddings(conditioning: Any) -> tuple[torch.Tensor, str]:
    """ComfyUI CONDITIONING [[tensor [1, L, D], {...}], ...] (CLIP Text Encode, SDVG Load Prompt Embeddings) ->
    (embeddings of the first entry, prompt text if it carries one)."""
    try:
        cond, extra = conditioning[0][0], conditioning[0][1]
    except (TypeError, IndexError, KeyError) as e:
        raise SDVGError("the conditioning input is empty or not ComfyUI CONDITIONING; connect CLIP Text Encode "
                        "(with a 'wan' CLIP loader) or SDVG Load Prompt Embeddings") from e
    if len(conditioning) > 1:
        raise SDVGError(f"the conditioning holds {len(conditioning)} entries (ConditioningCombine, or a list of "
                        f"prompts); SDVG runs one prompt per block: join the prompts with ConditioningConcat (one "
                        f"entry of both prompts' rows), or use SDVG Prompt Schedule for prompts that change")
    if not isinstance(cond, torch.Tensor) or cond.dim() != 3:
        raise SDVGError(f"the conditioning tensor must be [1, L, 4096] umT5 embeddings, got {type(cond).__name__} "
                        f"{list(getattr(cond, 'shape', []))}")
    return cond[:1].float().cpu(), str((extra or {}).get("sdvg_prompt", ""))


# Encoded prompts kept across executions (key: the CLIP object and the text), so editing one line of a schedule
# re-encodes that line only. umT5-XXL embeddings are [1, 512, 4096] float32 = 8 MiB each: 32 of them are 256 MiB.
ENCODED_KEEP = 32
_ENCODED: "OrderedDict[tuple[str, str], torch.Tensor]" = OrderedDict()


def clip_encode(clip: Any, text: str) -> torch.Tensor:
    """Encode like CLIP Text Encode (clip.tokenize + clip.encode_from_tokens_scheduled), once per CLIP and text."""
    key = (object_token(clip), text)
    emb = _ENCODED.get(key)
    if emb is None:
        emb, _ = conditioning_embeddings(clip.encode_from_tokens_scheduled(clip.tokenize(text)))
        _ENCODED[key] = emb
        while len(_ENCODED) > ENCODED_KEEP:
            _ENCODED.popitem(last=False)
    _ENCODED.move_to_end(key)
    return emb


def engine_config(what: str, recipe: str, drafter_recipe: str, target_recipe: str, decode_rule: str,
                  drafter: DiTHandle | None) -> EngineConfig:
    """Each model's recipe (EngineConfig.for_run: its own input, else, on auto, the drafter kind's own, else
    `recipe`) and the decode rule; a name the core does not know is refused naming the input."""
    for name, value, options in (("recipe", recipe, list(RECIPE_NAMES)), ("drafter_recipe", drafter_recipe, ROLE_RECIPES),
                                 ("target_recipe", target_recipe, ROLE_RECIPES)):
        if value != AUTO or name == "recipe":
            try:
                recipe_by_name(value)
            except ValueError as e:
                raise SDVGError(f"{what}: {name} must be one of {options}, got {value!r} ({e})") from e
    with engine_errors(what):
        return EngineConfig.for_run(recipe, drafter_recipe, target_recipe, drafter.kind if drafter else None,
                                    decode_rule=decode_rule)


def prompt_schedule(what: str, positive, prompt: str, schedule: PromptSchedule | None,
                    text_len: int) -> PromptSchedule:
    """The run's schedule of PromptConditioning (embeddings cut or padded to the model's text length) from a single
    conditioning (+ its text) or a schedule."""
    if schedule is not None:
        if positive is not None:
            raise SDVGError(f"{what}: both 'positive' and 'schedule' are connected; a schedule holds every prompt "
                            f"(block 0's too): disconnect 'positive'")
        if prompt.strip():
            raise SDVGError(f"{what}: 'prompt' is filled but a schedule is connected, whose entries carry their own "
                            f"texts (ImageReward scores each block against its entry's): clear 'prompt'")
        return schedule.map(lambda p: wan_prompt(what, p.text, p.embeddings, text_len))
    if positive is None:
        raise SDVGError(f"{what}: connect 'positive' (CLIP Text Encode or SDVG Load Prompt Embeddings) or 'schedule' "
                        f"(SDVG Prompt Schedule)")
    emb, carried = conditioning_embeddings(positive)
    return PromptSchedule.one(wan_prompt(what, prompt.strip() or carried, emb, text_len))


_TOLD_CUTS: set[str] = set()  # conditionings whose cut was said (by content: once per ComfyUI session)


def wan_prompt(what: str, text: str, emb: torch.Tensor, text_len: int) -> PromptConditioning:
    """The prompt as Wan reads it (its 512-row rule: cut or padded to `text_len` rows); a conditioning that loses rows
    is said once, with how many (a ConditioningConcat of two prompts, a prompt of more than 511 tokens)."""
    about = f"{what}: the conditioning" + (f" of {text[:40]!r}" if text else "")
    note = cut_note(emb.shape[-2], text_len, about)
    if note:
        key = tensor_digest(emb, text)
        if key not in _TOLD_CUTS:
            _TOLD_CUTS.add(key)
            LOG.warning("SDVG: %s", note)
    return PromptConditioning.make(text, fit_text_len(emb, text_len))


def pixel_inputs() -> list:
    """The optional given pixels of a generation (SDVG Start and SDVG Generate; docs/pixels.md): the same words as the
    command line's flags and the evaluation rows (start_image, input_video, video_mode, strength)."""
    return [
        io.Image.Input(StartImage.input, optional=True,
                       tooltip="Image-to-video: the video begins with this picture (Load Image; the first image of a "
                               "batch). It is centre-cropped to the width/height's aspect and resized; the first block "
                               "still comes from the target. Leave 'input_video' unconnected."),
        io.Image.Input(VideoToVideo.input, optional=True,
                       tooltip="A video as IMAGE frames (core Load Video + Get Video Components, or VHS Load Video), "
                               "cropped and resized like start_image: restyled block by block (video_mode "
                               "video_to_video) or continued (extend). The run ends where the input ends. Connect "
                               "Get Video Components' fps to 'fps' so the run keeps the video's timing."),
        io.Combo.Input("video_mode", options=list(VIDEO_MODES), default=VIDEO_MODES[0], optional=True,
                       tooltip="What 'input_video' is for. video_to_video: each input block is noised at 'strength' "
                               "and denoised by the drafter (the target redoes rejected blocks from the same noised "
                               "input). extend: the output begins with the video and continues it."),
        io.Float.Input("strength", default=VideoToVideo.default_strength, min=0.0, max=1.0, step=STRENGTH_STEP,
                       optional=True,
                       tooltip="video_to_video only: how far each input block is noised (1 = from pure noise, the "
                               "input is ignored; lower keeps more of the input)."),
        io.Float.Input("fps", min=0.0, max=FPS_MAX, optional=True, force_input=True,
                       tooltip="The frame rate of 'input_video' (Get Video Components' fps output): its frames are "
                               "resampled by time to the run's 16 fps, so a 30 fps clip keeps its duration. "
                               "Unconnected: the frames are taken as they are, one per output frame."),
    ]


def pixel_input(what: str, start_image: torch.Tensor | None, input_video: torch.Tensor | None,
                video_mode: str = VIDEO_MODES[0], strength: float = VideoToVideo.default_strength,
                fps: float | None = None) -> PixelInput | None:
    """The given pixels of the inputs (None: text-to-video); sdvg_core checks the frames, the strength and the fps."""
    if start_image is not None and input_video is not None:
        raise SDVGError(f"{what}: both 'start_image' and 'input_video' are connected; a run starts from one of them: "
                        f"disconnect the other")
    if start_image is not None:
        with engine_errors(what):
            return PixelInput.of(StartImage.name, start_image)
    if input_video is None:
        return None
    if video_mode not in VIDEO_MODES:
        raise SDVGError(f"{what}: video_mode must be one of {list(VIDEO_MODES)}, got {video_mode!r}")
    kind = MODES[video_mode]
    with engine_errors(what):  # a strength widget is always there: it acts only where the mode takes one
        return PixelInput.of(video_mode, input_video, strength if kind.takes_strength else None,
                             fps=fps if fps else None)


def prepare_run(what: str, target: DiTHandle, vae, positive, prompt: str, width: int, height: int,
                num_blocks: int, seed: int, recipe: str, decode_rule: str, cache_gb: float,
                drafter: DiTHandle | None = None, image_reward: HostedScorer | None = None,
                schedule: PromptSchedule | None = None, drafter_recipe: str = AUTO, target_recipe: str = AUTO,
                pixels: PixelInput | None = None, frames: int = 0, route_vae: Any = None) -> tuple[Session, GenerationSpec]:
    """The session and the spec of the inputs, not started yet: the prompt schedule and the given pixels become part
    of the spec (`frames`: the video's length in frames, its last block maybe shorter; 0: `num_blocks` whole blocks),
    each model's recipe part of the engine config, and ComfyUI's reservation is sized for both. `route_vae`: the
    `route_vae` input (routing.py): a tiny decoder to route on, which may decode the video."""
    config = engine_config(what, recipe, drafter_recipe, target_recipe, decode_rule, drafter)
    router, decodes_output = resolve_route(what, route_vae)
    if decodes_output:
        config = dataclasses.replace(config, output_decoder="route")
    shared_memo.set_cache_budget(cache_gb)
    with engine_errors(what):
        entries = prompt_schedule(what, positive, prompt, schedule, target.dit.cfg.text_len)
        session = Session(target, drafter, host_vae(vae), image_reward, config, router)
        if frames:  # the video's length in frames: its last block may be shorter (GenerationSpec.for_frames)
            spec = GenerationSpec.for_frames(entries, width, height, frames, seed, pixels=pixels)
            if spec.num_blocks > MAX_BLOCKS:
                raise ValueError(f"frames {frames} makes {spec.num_blocks} blocks, more than {MAX_BLOCKS}: give fewer")
        else:
            spec = GenerationSpec(entries, width, height, num_blocks, seed, pixels=pixels)
        session.reserve(spec)  # size this run's reservation for its window; refuse sizes that cannot fit
    return session, spec


def start(what: str, engine: Engine, session: Session, spec: GenerationSpec, policy: Policy | None = None) -> Run:
    """The run started once by the engine that goes on to run it: the engine refuses what it cannot run and encodes a
    start image or a video to extend, into that engine's memo."""
    with engine_errors(what):
        return Run(session, engine.start(spec), policy)


def need(what: str, session: Session, spec: GenerationSpec, drafter: bool = False, scorer: bool = False,
         where: str = "SDVG Start") -> None:
    """Refuse, before any work, an operation whose model inputs are missing, naming the input to connect (on the node
    `where`)."""
    if drafter and session.drafter is None:
        raise SDVGError(f"{what}: no drafter; connect SDVG Load Drafter to the 'drafter' input of {where}")
    if scorer and session.scorer is None:
        raise SDVGError(f"{what}: no ImageReward; connect SDVG Load ImageReward to the 'image_reward' input of {where}")
    if scorer and not all(p.text for _, p in spec.schedule):
        raise SDVGError(f"{what}: ImageReward needs the prompt text; fill {where}'s 'prompt' (the text you encoded)")


def node_policy(what: str, name: str, tau: float, force_reject_first: bool) -> Policy:
    """A node's policy widget (the core's grammar; an older workflow's `stride_k2`, ... read through its table), its
    tau slider (for the kinds that take one) and force_reject_first."""
    try:
        return policy_by_name(name, tau=float(tau), force_reject_first=bool(force_reject_first))
    except PolicyNameError as e:
        raise SDVGError(f"{what}: {sentence(e)}") from e


def block_steps(engine: Engine, spec: GenerationSpec, role: str | None = None) -> int:
    """Model calls per block in the plan the engine runs for `role` (None: the larger of the two roles', for a bar
    over both): `Engine.plan_for`, so a video-to-video run's bar counts its strength's steps."""
    return max(engine.plan_for(spec, r).num_steps for r in ((role,) if role else ("drafter", "target")))


def describe_start(run: Run) -> str:
    """What SDVG Start shows: size, frames, seed, each model's recipe, the prompt schedule."""
    spec, config = run.state.spec, run.session.config
    frames = run.session.vae.config.pixel_frames(spec.num_latent_frames)
    text = (f"{spec.num_blocks} blocks x {spec.frames_per_block} latent frames -> {frames} frames at "
            f"{spec.width}x{spec.height}, seed {spec.seed}, recipes: drafter {config.recipe_for('drafter').name}, "
            f"target {config.recipe_for('target').name}")
    if spec.schedule.switches:
        text += "\nprompts: " + "; ".join(f"block {b}: {p.text[:50]!r}" for b, p in spec.schedule)
    if spec.pixels is not None:
        text += f"\npixels: {describe(spec.pixels)} (from {spec.pixels.source.name})"
    if run.session.route_vae is not None:
        text += f"\nrouting decoder: {run.session.route_vae.info}" + (
            "; it decodes the video too (preview)" if config.output_decoder == "route" else "")
    return text
