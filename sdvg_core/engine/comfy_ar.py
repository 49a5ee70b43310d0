"""SDVG on the terms of ComfyUI core's autoregressive sampler (0.33+): its sigmas, its noise rule, its latent layout
and its image-to-video start latent (docs/comfyui.md, "SDVG Sampler (AR video)").

Core's loop (comfy/k_diffusion/sampling.py `sample_ar_video`) is Self-Forcing's append-cache inference with the
sigmas of a scheduler node: per block, a call at every sigma but the last (x0 = x - sigma * v; re-noised to the next
sigma), then one clean call at sigma 0 that appends the block's keys and values; a start latent goes into the cache
first through one sigma-0 call. This module gives the engine those terms and nothing else: a step plan from given
sigmas (`sigma_plan`), a recipe running it (`with_plan`), the start latent as given latents (`StartLatentSpec`,
`start`), the blocks of a [B, C, T, h, w] video (`ARVideo`: any block size, a shorter last block as core runs it)
and the generation loop (`generate`). The noise rule is
`noise.ComfyARNoise`. Pure torch: no ComfyUI import.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import torch

from ..given.latents import GivenLatents
from ..derived.digest import tensor_digest
from .recipes import RECIPE_NAMES, recipe_by_name
from ..sampling.timesteps import NUM_TRAIN_TIMESTEPS, StepPlan
from .state import GenerationSpec, GenerationState, blocks_for

# ComfyUI's flow models turn a sigma into the network's timestep as sigma * 1000 in float32
# (comfy/model_sampling.py ModelSamplingDiscreteFlow.timestep, multiplier 1000 = Wan's training steps).
TIMESTEP_MULTIPLIER = float(NUM_TRAIN_TIMESTEPS)
# core's loop is Self-Forcing's append-cache inference (the whole video in one KV cache, a clean commit call per block):
# the target runs it, so its result is core's; a drafter may run any recipe that appends to one cache (LongLive's sink
# and window too), not one that rebuilds its context every block
CORE_AR_RECIPE = "self_forcing"
AR_RECIPES = tuple(n for n in RECIPE_NAMES if not recipe_by_name(n).rebuilds_context_every_block)


@dataclass(frozen=True)
class SigmaPlan(StepPlan):
    """A step plan whose sigmas are given (a scheduler node's), not looked up in the shifted table."""

    given_sigmas: tuple[float, ...] = ()

    @property
    def sigmas(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.given_sigmas


def sigma_plan(sigmas: Sequence[float] | torch.Tensor) -> SigmaPlan:
    """The plan core's loop runs for `sigmas` (a SIGMAS tensor: decreasing, ending at 0): one call per sigma but the
    last, at timestep sigma * 1000 computed in float32 as core computes it, and a clean commit call."""
    s = torch.as_tensor(sigmas, dtype=torch.float32).flatten().cpu()
    if s.numel() < 2:
        raise ValueError(f"the sigmas hold {s.numel()} value(s); a block needs at least one step: connect a scheduler "
                         f"(e.g. BasicScheduler) giving two or more sigmas ending at 0")
    if float(s[-1]) != 0.0:
        raise ValueError(f"the sigmas end at {float(s[-1]):g}, not 0: SDVG commits each block's clean latents, so the "
                         f"last sigma must be 0 (a scheduler with denoise 1)")
    steps = s[:-1]
    if bool((steps <= 0).any()) or bool((steps > 1).any()) or bool((steps[1:] >= steps[:-1]).any()):
        raise ValueError(f"the sigmas {[round(float(v), 4) for v in s]} must fall strictly from at most 1 to 0 with "
                         f"no 0 before the end (a flow model's schedule)")
    timesteps = tuple(float(t) for t in steps * TIMESTEP_MULTIPLIER)
    return SigmaPlan(f"sigmas_{steps.numel()}", timesteps, commit_clean=True,
                     given_sigmas=tuple(float(v) for v in steps))


@lru_cache(maxsize=None)
def _planned(cls: type) -> type:
    """`cls` with a `fixed_plan` field that its `plan` returns (a frozen dataclass, so memo keys name the plan)."""
    field = ("fixed_plan", StepPlan, dataclasses.field(default=None))
    return dataclasses.make_dataclass(f"{cls.__name__}WithPlan", [field], bases=(cls,), frozen=True,
                                      namespace={"plan": property(lambda self: self.fixed_plan),
                                                 "__doc__": f"{cls.__name__} denoising at a given step plan."})


def with_plan(recipe, plan: StepPlan):
    """`recipe` (same context rule, window, name) denoising every block at `plan` (both roles share core's sigmas,
    so the drafter and the target run from the same noise)."""
    if not plan.commit_clean:
        raise ValueError("core's AR loop commits each block with a clean call: the plan must have commit_clean")
    if recipe.rebuilds_context_every_block:
        raise ValueError(f"the {recipe.name} recipe rebuilds its context every block; core's AR loop appends to one "
                         f"KV cache: use self_forcing or longlive")
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(recipe)}
    fields.pop("fixed_plan", None)
    return _planned(type(recipe))(**fields, fixed_plan=plan)


@dataclass(frozen=True)
class ARVideo:
    """The blocks of a video latent [B, C, T, h, w] (EmptyARVideoLatent's) after `first_frame` start frames, as core's
    loop makes them: blocks of `frames_per_block` latent frames, the last one shorter when they do not divide the
    frames left (25 frames -> 7 latent frames = 3 + 3 + 1)."""

    frames: int  # T
    first_frame: int  # latent frames a start latent takes (0: text-to-video)
    frames_per_block: int

    def __post_init__(self):
        if self.frames_per_block < 1:
            raise ValueError(f"num_frame_per_block must be at least 1, got {self.frames_per_block}")
        if self.frames <= self.first_frame:
            raise ValueError(f"the latent has {self.frames} frame(s) and the start latent takes {self.first_frame}: "
                             f"nothing is left to generate. Set the length to at least "
                             f"{pixel_length(self.first_frame + 1)}")

    @property
    def latent_frames(self) -> int:
        """Latent frames the blocks make (the start latent's not counted)."""
        return self.frames - self.first_frame

    @property
    def num_blocks(self) -> int:
        return blocks_for(self.latent_frames, self.frames_per_block)


def pixel_length(latent_frames: int) -> int:
    """The `length` widget value (pixel frames) that gives `latent_frames`: (length - 1) // 4 + 1 (Wan 2.1's VAE)."""
    return 1 + 4 * (latent_frames - 1)


def latent_digest(latents: torch.Tensor) -> str:
    """Names a start latent in the root lineage: another start image shares no cached result."""
    return tensor_digest(latents.to(torch.float32))


@dataclass(frozen=True)
class StartLatentSpec(GenerationSpec):
    """A spec whose video starts from given latents (core's ARVideoI2V start latent), named by their digest."""

    start_digest: str = ""

    def identity(self) -> str:
        return f"{super().identity()}|start_latent:{self.start_digest}" if self.start_digest else super().identity()


def start(engine, spec: GenerationSpec, start_latents: torch.Tensor | None = None) -> GenerationState:
    """The empty state of `spec`, with `start_latents` [1, g, C, h, w] as each role's given latents (the recipes put
    them in the cache with one clean call; the output decodes them first, as core's VAE Decode of its output does)."""
    state = engine.start(spec)
    if start_latents is None:
        return state
    if not isinstance(spec, StartLatentSpec) or spec.start_digest != latent_digest(start_latents):
        raise ValueError("a start latent needs a StartLatentSpec naming its digest (latent_digest)")
    latents = start_latents.detach().to("cpu", torch.float32)
    target = engine.recipes["target"].given_encoding
    encodings = {r.given_encoding: latents for r in engine.recipes.values()}
    given = GivenLatents("start_image", encodings, target if target.decodes_given else None, frames_used=1)
    return dataclasses.replace(state, given=given)


def generate(engine, spec: GenerationSpec, policy, start_latents: torch.Tensor | None = None,
             on_block: Callable[[object, GenerationState], None] | None = None) -> GenerationState:
    """Every block of `spec` (after the start latents): Engine.generate from `start`'s state."""
    return engine.generate(spec, policy, on_block, state=start(engine, spec, start_latents))


def video_latents(state: GenerationState, start_latents: torch.Tensor | None = None) -> torch.Tensor:
    """The video as core's sampler returns it: [1, C, T, h, w] float32, the start latents first."""
    parts = ([] if start_latents is None else [start_latents.detach().to("cpu", torch.float32)])
    parts += [b.latents for b in state.blocks]
    return torch.cat(parts, dim=1).permute(0, 2, 1, 3, 4).contiguous()
