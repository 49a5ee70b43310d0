"""Given pixels as a run uses them (docs/pixels.md sections 4-5): what the engine asks of a run's start image, video
to extend or video to restyle.

- `plan_for(recipe, spec)`: the timesteps a role denoises a block at (a video-to-video run's: from its strength), the
  one rule the engine, the reports, the progress bars and the counted baseline use.
- `GivenPixels.start`: the checks a request must pass before any model call (`PixelInput.check_run`), then the given
  latents of a start image or an extension (given/latents.py), encoded once and memoised.
- `GivenPixels.first_input`: what a video-to-video block's first call denoises (its input block noised to the plan's
  first step, given/stream.py), and `stopped`: the state ended where the input runs out or cannot be read.
- `given_output`: the frames the output video begins with.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

import torch

from ..derived.memo import Memoiser
from ..sampling.timesteps import StepPlan, noise_input
from ..derived.tally import Account, Tally
from .latents import GivenLatents, given_latents
from .stream import InputVideo

Interrupt = Callable[[], Callable[[], None] | None]
# Krea's server drops frames 0-2 of the first block it decodes (release_server.py generate_block_internal,
# `pixels[:, 3:]` for block 0: 6 of 9 frames sent). This pack does so where Krea's decoder restarts after given pixels
# (a start image or an extension with a Krea target, whose output begins with the pixels as read): block 0's first
# latent is decoded as a video's lone first frame though it is not one. Text-to-video and video-to-video keep all 9
# (docs/pixels.md §5: the reason).
RESTART_HIDDEN_FRAMES = 3
INPUT_ENDED, INPUT_UNREADABLE = "input_ended", "input_unreadable"  # GenerationState.stop_cause of a stop here


def plan_for(recipe, spec) -> StepPlan:
    """The plan a role's recipe denoises a block of `spec` at: its own, or for video-to-video the strength's
    (Krea's truncated schedule; Self-Forcing's trained steps from the strength on)."""
    if spec.pixels is None or not spec.pixels.kind.streamed:
        return recipe.plan
    return recipe.strength_plan(spec.pixels.strength)


class GivenPixels:
    """The engine's view of a run's given pixels (none for text-to-video): the step plan each role denoises at, the
    latents encoded at start, each video-to-video block's noised input, and the stop where the input ends."""

    def __init__(self, vae, vae_key: str, memoiser: Memoiser, recipes: dict, interrupt: Interrupt):
        self.vae, self.vae_key, self.memoiser, self.recipes = vae, vae_key, memoiser, recipes
        self._interrupt = interrupt
        self.inputs = InputVideo(vae, vae_key, memoiser, interrupt)

    def plan_for(self, spec, role: str) -> StepPlan:
        return plan_for(self.recipes[role], spec)

    def start(self, spec, tally: Tally | None = None) -> GivenLatents | None:
        """The given latents of a new run (None for text-to-video); what the roles' recipes cannot start from is
        refused before any work (PixelInput.check_run: the rules the command lines check too)."""
        self.close()
        if spec.pixels is None:
            return None
        tc = self.vae.config.temporal_compression
        spec.pixels.check_run((spec.height, spec.width), self.recipes.values(), spec.frames_per_block, spec.num_blocks,
                              tc)
        target = self.recipes["target"].given_encoding
        given = given_latents(self.memoiser, self.vae, self.vae_key, spec.pixels, (spec.height, spec.width),
                              tuple(r.given_encoding for r in self.recipes.values()), target, spec.frames_per_block,
                              self._interrupt(), tally)
        if not given.streamed and not target.decodes_given:  # the decoder restarts at block 0 (Krea)
            given = replace(given, hidden_frames=RESTART_HIDDEN_FRAMES)
        return given

    @staticmethod
    def start_account(state, b: int) -> Account:
        """What encoding a start image or an extension cost at Engine.start: block b = 0's record carries it."""
        return state.given.account if b == 0 and state.given is not None else Account()

    @staticmethod
    def hidden_frames(state, b: int) -> int:
        """Frames at the start of block b's decode the output leaves out (RESTART_HIDDEN_FRAMES for block 0 where
        Krea's decoder restarts after given pixels, else 0)."""
        return state.given.hidden_frames if b == 0 and state.given is not None else 0

    def first_input(self, state, b: int, initial: torch.Tensor, plan: StepPlan, part: Tally) -> torch.Tensor:
        """What block b's first call denoises: its noise, or for video-to-video its input noised to the plan's first
        step with the block's own initial draw (drafter and target start from the same input; docs/pixels.md §4)."""
        if state.spec.pixels is None or not state.spec.pixels.kind.streamed:
            return initial
        return noise_input(self.inputs.block(state, b, part).to(initial.device), initial, plan)

    def stopped(self, state, tally: Tally):
        """The state, ended here when block state.next_block has no input: a video-to-video input that ran out, or
        whose frames cannot be decoded from there. The run ends with the blocks it has and says why (the state's and
        the report's `stopped` and `stop_cause`; the host prints it). Reading and encoding the block's input is the block's `input` phase."""
        spec = state.spec
        if state.done or spec.pixels is None or not spec.pixels.kind.streamed:
            return state
        b = state.next_block
        with tally.phase("input"):
            entry = self.inputs.entry(state, b, tally)
        if entry is not None and entry.latents is not None:
            return state
        end = f"the run ends after {b} of {spec.num_blocks} block(s)"
        if entry is not None and entry.unreadable:
            why, cause = f"{entry.unreadable}; {end}", INPUT_UNREADABLE
        else:
            need = state.given.block_start(b + 1)
            why, cause = f"the input video ends before block {b} ({need} input frames needed): {end}", INPUT_ENDED
        return state.stop(why, cause)

    def close(self) -> None:
        """Forget the input reader (the run ended, or a new one starts)."""
        self.inputs.close()


def given_output(vae, state, rule: str, interrupt: Callable[[], None] | None = None) -> Iterator[torch.Tensor]:
    """The pixels the output video begins with, [1, 3, t, H, W] pieces in [-1, 1]: the given latents decoded
    (Self-Forcing / LongLive targets: the decoder runs through them, as their references decode `output`) or the
    given pixels as read (Krea, whose decoder starts at the first generated block); none for video-to-video."""
    given: GivenLatents | None = state.given
    if given is None or given.streamed:
        return
    spec = state.spec
    prefix = given.decode_prefix
    if prefix is not None:
        cache, F = None, spec.frames_per_block
        for s in range(0, prefix.shape[1], F):
            z = prefix[:, s:s + F].to(vae.device).permute(0, 2, 1, 3, 4)  # [1, C, f, h, w]
            pixels, cache = vae.decode_stream(z, cache, rule=rule, interrupt=interrupt)
            yield pixels.clamp(-1, 1).cpu()
        return
    yield from spec.pixels.source.pieces((spec.height, spec.width), 0, given.frames_used)
