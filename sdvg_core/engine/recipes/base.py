"""What a context recipe is and what it may use from the engine (docs/design.md §2.3).

A recipe owns one model's context rule end to end: which committed frames (or re-encoded pixels) go into the
model's KV cache for block b, which RoPE positions they get, how big the cache is, what it costs and how it is
memoised. The engine asks `recipe.context(host, role, dit, state, b, tally)` and runs the recipe's step plan.
Drafter and target each have their own recipe (EngineConfig.drafter_recipe / target_recipe). A new recipe is
one new class with the members of `Recipe`.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Protocol

import torch

from ...models.wan import CausalWan, KVCache, KVWrite, TextKV
from ...derived.keys import KVKey
from ...derived.memo import Hold
from ...sampling.timesteps import StepPlan
from ..state import GenerationSpec, GenerationState
from ...derived.tally import Tally


class ContextHost(Protocol):
    """What a recipe may use from the engine: memoised computation, KV views, model calls, pixels and tracing.
    Never the memo itself nor a tally's fields: what a recipe computes is charged to the tally it is given."""

    vae_key: str
    decode_rule: str
    temporal_compression: int  # pixel frames per latent frame after the first (4 for Wan 2.1)
    tracing: bool

    def memoised(self, key: Hashable, label: str, tally: Tally, compute: Callable[[Tally], Any], *,
                 hold: Hold | None = None) -> Any:
        """The result under `key`: reused (recorded as `label`, its cost credited once per operation), else
        `compute(part)`, whose cost is what it charges to `part`. `hold` keeps it for the rest of the generation
        outside the memo's budget (derived data the running generation reads again)."""

    def kv_key(self, dit: CausalWan, recipe: "Recipe", state: GenerationState, b: int) -> KVKey: ...

    def empty_kv(self, dit: CausalWan, spec: GenerationSpec, window_frames: int, *, sink: int = 0,
                 rope: str = "baked") -> KVCache:
        """A fresh cache on the dit's device holding `window_frames` latent frames, the first `sink` a sink."""

    def run_kv(self, dit: CausalWan, recipe: "Recipe", spec: GenerationSpec,
               layout: tuple[int, int, str]) -> KVCache:
        """An empty view of this run's one KV buffer for (dit, recipe, layout: window frames, sink frames, RoPE
        mode), allocated at its first use in the run and reused by every later block (views of it that a later
        write overwrites go stale)."""

    def rebuilt_kv(self, role: str, dit: CausalWan, recipe: "Recipe", state: GenerationState, b: int,
                   tally: Tally, layout: tuple[int, int, str],
                   rebuild: Callable[[KVCache, Tally], KVCache]) -> KVCache:
        """Block b's context rebuilt into the run's buffer (`rebuild(empty view of it, part)`), or a memoised
        snapshot of it restored there; the memo keeps a clone (the run's buffer is overwritten by the next block)."""

    def extend_kv(self, role: str, dit: CausalWan, recipe: "Recipe", state: GenerationState, b: int, tally: Tally,
                  layout: tuple[int, int, str], commit: Callable[[int, KVCache, Tally], KVCache],
                  prefix: Callable[[KVCache, Tally], KVCache] | None = None) -> KVCache:
        """An append cache's view for block b: the newest memoised view of this history extended by
        `commit(k, view, part)` for each block k it lacks (from an empty cache of `layout`, passed through
        `prefix(view, part)` when given, when there is none)."""

    def context_forward(self, role: str, dit: CausalWan, latents: torch.Tensor, t: torch.Tensor,
                        state: GenerationState, frame_offset: int, kv: KVCache | KVWrite, tally: Tally,
                        text_block: int | None = None) -> KVCache:
        """One clean forward that writes `latents` [1, F, C, h, w] into `kv` (appended to a view, or a `KVWrite` plan
        such as a recache's rewrite) and returns the committed view, under block `text_block`'s prompt (default:
        the block being generated)."""

    def text(self, dit: CausalWan, state: GenerationState, tally: Tally, b: int | None = None) -> TextKV:
        """Cross-attention K/V of block b's prompt (default: the block being generated), held for the run."""

    def pixels_before(self, b: int, state: GenerationState) -> int:
        """Decoded pixel frames of the generated blocks before block b (given frames the output decodes first are
        not counted)."""

    def given_latents(self, state: GenerationState, recipe: "Recipe") -> torch.Tensor | None:
        """The start image's / extension's latents [1, g, C, h, w] as `recipe` encodes them, or None."""

    def pixel_frame(self, state: GenerationState, g: int, tally: Tally) -> torch.Tensor:
        """Committed decoded pixel frame number g, [1, 3, H, W] in [-1, 1]."""

    def encode_frame(self, frame: torch.Tensor, spec: GenerationSpec, tally: Tally) -> torch.Tensor:
        """One pixel frame re-encoded by the VAE -> latent [1, 1, C, h, w] float32."""

    def trace(self, name: str, t: torch.Tensor) -> None: ...

    def trace_kv(self, name: str, kv: KVCache | KVWrite, extra: int = 0, slot_frame: bool = False) -> None: ...


class Recipe(Protocol):
    """One model's context rule. Frozen dataclasses: equal recipes are the same rule (memo keys hold them)."""

    name: str
    # the reference SDVG loop rebuilds this recipe's context before every block (lazy=False does the same)
    rebuilds_context_every_block: bool
    # a reference SDVG implementation exists for this recipe (report.reference_forwards)
    has_reference_sdvg: bool
    # the recipe does what its reference does when the prompt changes between blocks (a recache, or a context
    # rebuilt under each block's own prompt); a recipe that cannot is refused a prompt schedule at Engine.start
    supports_prompt_switch: bool

    @property
    def plan(self) -> StepPlan:
        """The timesteps a block is denoised at with this recipe."""

    def strength_plan(self, strength: float) -> StepPlan:
        """The timesteps a video-to-video block is denoised at, from its input noised at `strength` (ValueError
        for a strength the recipe cannot start from)."""

    @property
    def given_encoding(self) -> Any:
        """How this recipe encodes a start image or an extension (given/latents.py GivenEncoding)."""

    def validate(self, spec: GenerationSpec) -> None:
        """Raise ValueError, before any work, when the spec cannot run with this recipe."""

    def window_frames(self, frames_per_block: int, num_latent_frames: int) -> int:
        """Latent frames the model's KV buffer holds (its device memory)."""

    def query_frames(self, frames_per_block: int) -> int:
        """The most latent frames one model call of this recipe processes (activation memory)."""

    def pixel_history(self, temporal_compression: int) -> int:
        """Decoded pixel frames of the committed video this recipe reads back (0: none)."""

    def context_forwards(self, num_blocks: int, switches: int = 0) -> int:
        """Context forwards one model makes in a run where it generates every block of a video whose prompt
        changes `switches` times."""

    def context(self, host: ContextHost, role: str, dit: CausalWan, state: GenerationState, b: int,
                tally: Tally) -> tuple[KVCache, int]:
        """The KV cache `dit` needs to generate block b, and the block's RoPE frame offset."""
