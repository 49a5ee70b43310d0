"""A live run: the engine's own generation (`Engine.generate`), with each block's settings read at the boundary before
it (`LiveRun.boundary`) and written into the run's timeline; and its replay, the same generation under the recorded
schedule (`replay_settings`). Live and replay share every line below the boundary, so a replay gives the same bits.

At the boundary before block b: the settings in force are taken once (tau, drafter on or off, the prompt, a
video-to-video run's strength, Stop); a new prompt enters the spec's prompt schedule at b (the recipes' prompt-switch
recache does the rest); a video-to-video block's input frames are taken from the live buffer and recorded; the policy
in force is named in the one grammar. Nothing changes within a block.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import torch

from ..engine.policy import Policy
from ..engine.policy_names import policy_by_name, spec_of
from ..engine.prompts import PromptConditioning
from ..engine.recipes import RECIPE_NAMES, check_prompt_switches, recipe_by_name
from ..engine.state import GenerationState
from ..given.pixels import INPUT_ENDED
from .controls import LiveSettings
from .frames import FrameBuffer, LiveSource
from .timeline import BlockSettings, Timeline

USER_STOP = "user_stop"  # GenerationState.stop_cause of a run ended by Stop
USER_STOPPED = "stopped by the user"
DRAFTER_OFF_POLICY = "target-only"  # the policy while the drafter is off: the target makes every block
# The recipes a live run takes: those that can change the prompt between blocks and hold a bounded context (a run of
# any length at flat cost: their KV window does not grow with the video), the published pairing first.
_PROBE_FRAMES = 10_000  # latent frames of a long video, to tell a bounded window from a growing one
LIVE_RECIPES = tuple(n for n in RECIPE_NAMES if recipe_by_name(n).supports_prompt_switch
                     and recipe_by_name(n).window_frames(3, _PROBE_FRAMES) < _PROBE_FRAMES)

Encode = Callable[[str], torch.Tensor]  # prompt text -> umT5 embeddings [1, L, D]


class PromptBook:
    """A live run's prompts by text, each encoded once: the prepared ones before the run (a switch to one is instant),
    a new one at the boundary where it is first used, on the run's own thread."""

    def __init__(self, encode: Encode | None, prepared: Iterable[PromptConditioning] = ()):
        self._encode = encode
        self._by_text: dict[str, PromptConditioning] = {}
        for p in prepared:
            self._by_text.setdefault(p.text, p)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(self._by_text)

    def get(self, text: str) -> PromptConditioning:
        p = self._by_text.get(text)
        if p is None:
            if self._encode is None:
                raise ValueError(f"the prompt {text[:60]!r} was not prepared and this run has no text encoder: "
                                 f"choose a prepared prompt, or connect a CLIP to encode new ones")
            p = self._by_text[text] = PromptConditioning.make(text, self._encode(text))
        return p


def live_policy(settings: LiveSettings, base_policy: str = "sdvg") -> Policy:
    """The policy a block is routed by: `base_policy` at the settings' tau while the drafter is on, else the target
    alone (from that block on, until it is switched on again)."""
    if not settings.drafter:
        return policy_by_name(DRAFTER_OFF_POLICY)
    return policy_by_name(base_policy, tau=settings.tau)


class LiveRun:
    """One live run of `engine` (started: `run(state)`): `settings_for(b)` gives the settings in force at the boundary
    before block b (a live run's controls, or a replay's timeline); `prompts` turns a prompt's text into its
    conditioning; a video-to-video run's input comes from `frames` (live: taken from the buffer and recorded into
    `source`) or from `source` alone (a replay of the recording)."""

    def __init__(self, engine, settings_for: Callable[[int], LiveSettings], prompts: PromptBook,
                 base_policy: str = "sdvg", frames: FrameBuffer | None = None, source: LiveSource | None = None,
                 timeline: Timeline | None = None):
        self.engine, self.settings_for, self.prompts, self.base_policy = engine, settings_for, prompts, base_policy
        self.frames, self.source = frames, source
        self.timeline = timeline if timeline is not None else Timeline()
        self.timeline.blocks, self.timeline.base_policy = [], base_policy
        if source is not None:
            self.timeline.input_file, self.timeline.input_hw = source.path.name, tuple(source.hw)
            self.timeline.input_digest = source.digest

    # ------------------------------------------------------------------------------------------ the boundary
    def boundary(self, state: GenerationState) -> tuple[GenerationState, Policy]:
        """Before block state.next_block: the state to route it from (its prompt and input in place) and its policy;
        a stopped state when Stop was asked for or the live input ended."""
        b = state.next_block
        settings = self.settings_for(b)
        policy = live_policy(settings, self.base_policy)
        if settings.stop:
            self.timeline.stopped_by_user = True
            return state.stop(USER_STOPPED, USER_STOP), policy
        state = self._with_prompt(state, b, settings.prompt)
        state = self._with_strength(state, settings.strength)
        state, frames = self._with_input(state, b)
        if state.done:
            return state, policy
        name = spec_of(policy)
        self.timeline.blocks.append(BlockSettings(
            b, name.name if name is not None else policy.describe(), name.tau if name is not None else None,
            self.timeline.prompt_index(state.spec.prompt_at(b).text), settings.strength, frames, settings.version))
        return state, policy

    def _with_prompt(self, state: GenerationState, b: int, text: str) -> GenerationState:
        spec = state.spec
        if not text or spec.prompt_at(b).text == text:
            return state
        prompt = self.prompts.get(text)
        entries = spec.schedule.entries
        schedule = (spec.schedule.then(b, prompt) if entries[-1].first_block < b
                    else dataclasses.replace(spec.schedule, entries=entries[:-1] + (dataclasses.replace(entries[-1], prompt=prompt),)))
        new = dataclasses.replace(spec, schedule=schedule)
        check_prompt_switches(self.engine.recipes, new)
        return dataclasses.replace(state, spec=new)

    def _with_strength(self, state: GenerationState, strength: float | None) -> GenerationState:
        pixels = state.spec.pixels
        if strength is None or pixels is None or not pixels.kind.takes_strength or pixels.strength == strength:
            return state
        return dataclasses.replace(state, spec=dataclasses.replace(state.spec, pixels=dataclasses.replace(
            pixels, strength=strength)))

    def _with_input(self, state: GenerationState, b: int) -> tuple[GenerationState, tuple[int, int] | None]:
        """Block b's input frames recorded (live), or found in the recording (replay); the run ends where they do
        not come."""
        if self.source is None or state.given is None or not state.given.streamed:
            return state, None
        start, n = state.given.block_start(b), state.given.block_frames(b)
        if self.frames is not None:
            taken = self.frames.take(n, stopped=lambda: self.settings_for(b).stop)
            self.timeline.received_frames, self.timeline.dropped_frames = self.frames.received, self.frames.dropped
            if taken is None:
                why = "Stop was asked for" if self.settings_for(b).stop else "the live input sent no more frames"
                return state.stop(f"{why} before block {b}; the run ends after {b} block(s)", INPUT_ENDED), None
            first, count = self.source.record(taken)
            if first != start:
                raise RuntimeError(f"the live recording is at frame {first}, block {b} starts at {start}")
            return state, (first, count)
        if self.source.recorded < start + n:
            return state.stop(f"the recorded live input ends before block {b} ({start + n} frames needed, "
                              f"{self.source.recorded} recorded)", INPUT_ENDED), None
        return state, (start, n)

    # ------------------------------------------------------------------------------------------ the run
    def run(self, state: GenerationState, on_block: Callable | None = None) -> GenerationState:
        """Every block until Stop, the input's end or the spec's last block; `on_block(engine, state)` after each
        commit. The timeline holds what each committed block was made under."""
        final = self.engine.generate(state.spec, self.first_policy(state), on_block, state=state,
                                     boundary=self.boundary)
        return self.settle(final)

    def first_policy(self, state: GenerationState) -> Policy:
        """The policy before the first boundary is read (Engine.generate's `policy`; the boundary gives each block's)."""
        return live_policy(self.settings_for(state.next_block), self.base_policy)

    def settle(self, final: GenerationState) -> GenerationState:
        """The run ended at `final`: a block the input ended before, or one cut by a stop, is not part of the record."""
        del self.timeline.blocks[len(final.blocks):]
        return final


def replay_settings(timeline: Timeline) -> Callable[[int], LiveSettings]:
    """The settings a replay reads before block b: block b's recorded ones, then Stop after the last."""
    def settings_for(b: int) -> LiveSettings:
        if b >= len(timeline.blocks):
            return LiveSettings(tau=0.0, stop=True)
        s = timeline.blocks[b]
        drafter = s.policy != DRAFTER_OFF_POLICY
        return LiveSettings(tau=s.tau if s.tau is not None else 0.0, drafter=drafter, prompt=timeline.prompts[s.prompt],
                            strength=s.strength, version=s.settings_version)

    return settings_for
