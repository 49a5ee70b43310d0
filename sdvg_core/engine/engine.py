"""The SDVG engine: draft -> decode -> score -> route -> commit, over an immutable GenerationState.

Every operation takes a state and returns a new one. Derived data (per-prompt text K/V, KV caches, decoder
caches, anchors, drafts, scores, target blocks) lives in a bounded memo under typed keys (derived/keys.py) that name
every identity it depends on, so a re-run (e.g. after moving tau) recomputes only from the first block whose
decision changed, and can never read a cache built for another history.

Compute only what a decision needs (work.py): a forced block is not drafted; a score-blind policy does not score;
the target's context is built only when the target generates; a draft is decoded from the committed decoder cache
without changing it (decoded.py). `EngineConfig(lazy=False)` does all the work the reference implementation
does, for comparison; outputs are bit-identical either way. Context building belongs to the recipe
(recipes/) through ContextServices (context.py), memoised results to derived/memo.Memoiser, accounting to derived/tally.py.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import torch

from ..models.kv_cache import KVCopyStats
from ..models.wan import CausalWan
from .context import ContextServices
from ..sampling.denoise import denoise
from ..given.pixels import GivenPixels, given_output
from ..derived.keys import ROUTE_ROLE, RunKeys, require_key
from ..derived.memo import Memo, Memoiser, TieredMemo
from .noise import BlockNoise, NoiseSource, noise_identity
from .decoded import DecodeEntry
from .config import ROLES, EngineConfig
from .route_decoder import Decoders, check_route_vae
from .router import Router
from .policy import Policy, aggregate
from .recipes import Recipe, check_prompt_switches
from ..sampling.timesteps import StepPlan
from .state import BlockRecord, GenerationSpec, GenerationState, PendingBlock, extend_lineage
from ..derived.tally import PHASES, WORK_KEYS, Tally
from .work import LAZY, REFERENCE

__all__ = ["Engine", "Callbacks", "ProgressEvent", "Scorer", "DecodeEntry", "to_image", "PHASES", "WORK_KEYS"]

class Scorer(Protocol):
    key: str

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        """frames [F, H, W, 3] in 0..1 -> per-frame rewards [F]."""


@dataclass(frozen=True)
class ProgressEvent:
    kind: str  # "step" (a model call finished) or "block" (a block was committed)
    block: int
    num_blocks: int
    role: str = ""  # drafter / target
    step: int = 0
    num_steps: int = 0
    preview: torch.Tensor | None = None  # last committed frame [H, W, 3] in 0..1 (block events)
    record: BlockRecord | None = None


@dataclass
class Callbacks:
    """Host hooks: `interrupt()` raises to cancel; `progress(event)`; `run_id` stamps the records computed now."""

    interrupt: Callable[[], None] | None = None
    progress: Callable[[ProgressEvent], None] | None = None
    run_id: str = ""


class Engine:
    """Holds the models, the recipes and the memo; its operations are pure functions of the state.

    `kv_copies`: an instrumentation hook (models.kv_cache.KVCopyStats) counting the cached keys/values the KV views
    of this engine copy (a branch switch forks a buffer), for tests and benchmarks.

    `route_vae`: the routing decoder, when not the VAE (a tiny TAEHV, route_decoder.py): drafts are decoded by it for
    scoring, from its own memory of the committed blocks; None (or the VAE itself): the VAE routes, as always."""

    def __init__(self, target: CausalWan, vae, drafter: CausalWan | None = None, scorer: Scorer | None = None,
                 config: EngineConfig = EngineConfig(), noise_fn: Callable[[GenerationSpec, int], BlockNoise] | None = None,
                 tracer: Callable[[str, torch.Tensor], None] | None = None, memo: Memo | TieredMemo | None = None,
                 kv_copies: KVCopyStats | None = None, route_vae=None):
        self.target, self.drafter, self.vae, self.scorer = target, drafter, vae, scorer
        self.route_vae = None if route_vae is None or route_vae is vae else route_vae
        self.config = config
        self.work = LAZY if config.lazy else REFERENCE
        self.recipes: dict[str, Recipe] = {r: config.recipe_for(r) for r in ROLES}
        self.recipe: Recipe = self.recipes["target"]  # the baseline's recipe (reports compare with target-only)
        self.model_keys = role_identities(target, vae, drafter, scorer, self.route_vae)
        # a host may share one memo between engines built per call (keys hold every model's identity)
        self.memo = memo if memo is not None else TieredMemo.split(config.memo_bytes)
        self.memoiser = Memoiser(self.memo)
        self.noise = NoiseSource(noise_fn, target.cfg.in_dim, config.num_renoise)
        self.keys = RunKeys(self.model_keys, self.recipes, config.decode_rule,
                            noise_identity(noise_fn, shared_memo=memo is not None),
                            plans=lambda spec, role: self.plan_for(spec, role))
        self.callbacks = Callbacks()
        self._auto_run = uuid.uuid4().hex  # this engine's run id when the host gives none (a new one per start)
        history = max(r.pixel_history(vae.config.temporal_compression) for r in self.recipes.values())
        self.decoders = Decoders(vae, self.route_vae, self.model_keys, config, self.memoiser,
                                 lambda: self.callbacks.interrupt, history)
        # the VAE's store (the video, the recipes' pixels), the routing decoder's (the drafts), the output's
        self.pixels, self.route_pixels, self.output_pixels = self.decoders.vae, self.decoders.route, self.decoders.output
        self.route_decoder, self.output_decoder = self.decoders.route_name, self.decoders.output_name  # report names
        self.services = ContextServices(self.memoiser, vae, self.pixels, self.model_keys["vae"], config.decode_rule,
                                        tracer, self.callbacks, kv_copies)
        self.given = GivenPixels(vae, self.model_keys["vae"], self.memoiser, self.recipes, lambda: self.callbacks.interrupt)
        self.router = Router(self.decoders, scorer, self.keys, self.memoiser, self._tally, to_image)

    @property
    def run_id(self) -> str:
        """The execution computing now: the host's run id, else one the engine made at `start`."""
        return self.callbacks.run_id or self._auto_run

    # ------------------------------------------------------------------------------------------ start
    def start(self, spec: GenerationSpec) -> GenerationState:
        """Validate the request against the models and the recipe, and return the empty state."""
        width = spec.prompt.embeddings.shape[-1]  # every entry of a schedule has this width (GenerationSpec checks)
        for role, dit in (("target", self.target), ("drafter", self.drafter)):
            if dit is not None and dit.cfg.text_dim != width:
                raise ValueError(f"prompt embeddings have width {width} but the {role} expects {dit.cfg.text_dim} "
                                 f"(umT5-XXL embeddings are 4096 wide: use a 'wan' text encoder)")
        for recipe in self.recipes.values():
            recipe.validate(spec)
        check_prompt_switches(self.recipes, spec)
        self._auto_run = uuid.uuid4().hex
        given = self.given.start(spec, self._tally())  # pixels in: checked, encoded once, memoised (given/pixels.py)
        return GenerationState(spec) if given is None else GenerationState(spec, given=given)

    def plan_for(self, spec: GenerationSpec, role: str = "target") -> StepPlan:
        """The timesteps `role` denoises a block of `spec` at (a video-to-video run's: from its strength)."""
        return self.given.plan_for(spec, role)

    def release_run(self) -> int:
        """The generation ended: drop what it held outside the memo's budget (returns the bytes released)."""
        self.given.close()
        self.services.release_run()
        return self.memo.release_run()

    # ------------------------------------------------------------------------------------------ operations
    def draft(self, state: GenerationState) -> GenerationState:
        """Operation: the drafter proposes the next block (pending.latents)."""
        tally = self._tally()
        state = self.given.stopped(state, tally)  # reading the block's input is its work (phase "input")
        if state.done:
            if state.stopped is not None:
                return state
            raise ValueError("all blocks are committed; nothing to draft")
        return self._draft(state, tally)

    def decode_draft(self, state: GenerationState) -> GenerationState:
        """Operation: decode the pending draft from the committed decoder cache, leaving it unchanged (router.py)."""
        return self.router.decode_draft(state)

    def score_draft(self, state: GenerationState) -> GenerationState:
        """Operation: ImageReward per frame of the decoded draft, all frames in one batch (router.py)."""
        return self.router.score_draft(state)

    def scored(self, state: GenerationState) -> tuple[GenerationState, bool]:
        """The pending draft with its scores, and whether its decode was skipped (scores memoised earlier)."""
        return self.router.scored(state)

    def route(self, state: GenerationState, policy: Policy) -> GenerationState:
        """Operation: the block step, top to bottom. Read the block's input, draft, decode and score what the work mode
        says the decision needs (work.py), decide, let the target make the block unless the draft is kept, commit."""
        tally = self._tally()
        state = self.given.stopped(state, tally)  # reading the block's input is its work (phase "input")
        if state.done:
            if state.stopped is not None:
                return state
            raise ValueError("all blocks are committed; nothing to route")
        b = state.next_block
        forced = policy.forced(b)
        work = self.work.block_work(policy, b, self.drafter is not None, self.scorer is not None,
                                    self.recipes["target"].rebuilds_context_every_block)
        if work.draft and state.pending is None:
            state = self._draft(state, self._tally())
        decode_skipped = False
        if work.score:
            state, decode_skipped = self.scored(state)
        p = state.pending or PendingBlock(b)
        score = aggregate(p.frame_scores, policy.aggregation) if p.frame_scores else None
        accepted = (not forced) and policy.accept(b, score)
        if decode_skipped and not accepted:  # a fresh run decoded the rejected draft to score it
            tally.credit({self.route_pixels.work_key: p.latents.shape[1]})
        context = self._context("target", self.target, state, b, tally) if work.target_context else None
        if accepted:
            latents, producer, decision = p.latents, "drafter", "accepted"
        else:
            latents, producer = self._generate("target", state, b, tally, context), "target"
            decision = "forced" if forced else "rejected"
        # the state keeps committed latents on the CPU (1.2 MB per block at 832x480): a long video's history takes
        # no device memory; recipes copy the few frames they read back (the hash below reads the CPU bytes anyway)
        latents = latents.to("cpu")
        lineage = extend_lineage(state.lineage, latents, producer, state.spec.prompt_at(b).key)
        draft = self.keys.draft_decode(state) if accepted and p.frames is not None else None
        pixels = self.decoders.commit(state, latents, lineage, draft, tally)
        record = BlockRecord(index=b, latents=latents, producer=producer, decision=decision, score=score,
                             frame_scores=tuple(p.frame_scores or ()),  # block 0 also carries the given encode
                             account=p.account + tally.account() + self.given.start_account(state, b),
                             lineage=lineage, run_id=self.run_id)
        if self.callbacks.progress is not None:
            preview = None if pixels is None else to_image(pixels[:, :, -1:])[0]
            self.callbacks.progress(ProgressEvent("block", b, state.spec.num_blocks, producer, preview=preview, record=record))
        return state.commit(record)

    def generate(self, spec: GenerationSpec, policy: Policy, on_block: Callable[["Engine", GenerationState], None]
                 | None = None, state: GenerationState | None = None,
                 boundary: Callable[[GenerationState], tuple[GenerationState, Policy]] | None = None) -> GenerationState:
        """Run every block; `on_block(engine, state)` after each commit (e.g. write the block's frames: a long
        video need not sit in memory). `state`: `spec` started another way (comfy_ar.start), else `start(spec)`.
        `boundary(state)`: read before each block, the state to route it from and the policy in force (a live run's
        settings arrive late: a new prompt, the block's input; a stopped state ends the run); else `policy` for every
        block. What the generation held is released at the end."""
        state = self.start(spec) if state is None else state
        try:
            while not state.done:
                committed = len(state.blocks)
                if boundary is not None:
                    state, policy = boundary(state)
                    if state.done:
                        break
                state = self.route(state, policy)
                if on_block is not None and len(state.blocks) > committed:  # not when the input ended the run
                    on_block(self, state)
        finally:
            self.release_run()
        return state

    # ------------------------------------------------------------------------------------------ outputs
    def committed_pixels(self, state: GenerationState, b: int) -> torch.Tensor:
        """Decoded pixels of committed block b, [1, 3, T, H, W] in [-1, 1] on the CPU (memoised by lineage), by the
        output decoder (the VAE; the routing decoder with output_decoder "route")."""
        return self.output_pixels.committed_pixels(state, b)

    def block_frames(self, state: GenerationState, b: int) -> torch.Tensor:
        """Committed block b's frames [T, H, W, 3] in 0..1 on the CPU (the newest block's are held: no decode)."""
        return to_image(self.committed_pixels(state, b))

    def output_frames(self, state: GenerationState, first: int = 0) -> Iterator[torch.Tensor]:
        """The output video from committed block `first` on, as [t, H, W, 3] pieces in 0..1 on the CPU; from block 0
        the given frames first (decoded by a Self-Forcing / LongLive target, as read for Krea, whose block 0 then
        starts at its 4th frame; none for text-to-video and video-to-video: docs/pixels.md §5)."""
        if first == 0:
            for pixels in given_output(self.output_pixels.vae, state, self.config.decode_rule, self.callbacks.interrupt):
                yield to_image(pixels)
        for b in range(first, len(state.blocks)):
            yield self.block_frames(state, b)[self.given.hidden_frames(state, b):]

    def frames(self, state: GenerationState) -> torch.Tensor:
        """The whole output video [T, H, W, 3] in 0..1 on the CPU (ComfyUI IMAGE layout)."""
        if not state.blocks:
            raise ValueError("no block committed yet")
        return torch.cat(list(self.output_frames(state)))

    # ------------------------------------------------------------------------------------------ generation
    def _draft(self, state: GenerationState, tally: Tally) -> GenerationState:
        """The state with the drafter's proposal of its next block pending."""
        latents = self._generate("drafter", state, state.next_block, tally)
        return state.with_pending(PendingBlock(state.next_block, latents, account=tally.account()))

    def _generate(self, role: str, state: GenerationState, b: int, tally: Tally,
                  context: tuple[object, int] | None = None) -> torch.Tensor:
        """Block b denoised by one model from the block's noise -> latents [1, F, C, h, w] (float32), memoised.
        `context`: the (kv, offset) the role's recipe already built for this block (the reference's work)."""
        dit, spec = self._role(role), state.spec
        plan = self.plan_for(spec, role)

        def make(part: Tally) -> torch.Tensor:
            kv, offset = context if context is not None else self._context(role, dit, state, b, part)
            with part.phase("draft" if role == "drafter" else "target"):
                text = self.services.text(dit, state, part)
                noise = self.noise(spec, b).to(dit.device)
                x = self.given.first_input(state, b, noise.initial, plan, part)

                def after_step(s: int) -> None:
                    part.add(f"{role}_forwards", 1)
                    if self.callbacks.progress is not None:
                        self.callbacks.progress(ProgressEvent("step", b, spec.num_blocks, role, s + 1, plan.num_steps))

                x0 = denoise(dit, x, plan, noise.renoise, text, kv, offset,
                             interrupt=self.callbacks.interrupt, after_step=after_step,
                             trace=lambda name, t: self.services.trace(f"{role}/block{b}/{name}", t))
                if self.services.tracing:
                    self.services.trace_kv(f"{role}/block{b}/kv_after_last_call", kv,
                                           extra=spec.block_frames(b) * kv.tokens_per_frame)
            return x0

        return self.memoiser.memoised(self.keys.block(role, state, b), role, tally, make)

    def _context(self, role: str, dit: CausalWan, state: GenerationState, b: int, tally: Tally):
        with tally.phase("context"):
            return self.recipes[role].context(self.services, role, dit, state, b, tally)

    # ------------------------------------------------------------------------------------------ helpers
    def _role(self, role: str) -> CausalWan:
        dit = self.drafter if role == "drafter" else self.target
        if dit is None:
            raise ValueError("this policy needs a drafter model, but the engine was built without one")
        return dit

    def _tally(self) -> Tally:
        return Tally(sync_cuda=self.config.sync_timing, run_id=self.run_id)


def role_identities(target: CausalWan, vae, drafter: CausalWan | None, scorer: Scorer | None,
                    route_vae=None) -> dict[str, str]:
    """Each model's stable identity by role (memo keys hold them), once the models are known to fit together;
    `route_vae`: a routing decoder other than the VAE (ROUTE_ROLE)."""
    keys = {"target": require_key(target, "target model"), "vae": require_key(vae, "VAE")}
    if route_vae is not None:
        check_route_vae(route_vae, vae, target.cfg.in_dim)
        keys[ROUTE_ROLE] = require_key(route_vae, "routing decoder")
    if drafter is not None:
        keys["drafter"] = require_key(drafter, "drafter model")
    if scorer is not None:
        keys["scorer"] = require_key(scorer, "ImageReward scorer")
    if drafter is not None and drafter.cfg.in_dim != target.cfg.in_dim:
        raise ValueError(f"drafter and target disagree on latent channels ({drafter.cfg.in_dim} vs "
                         f"{target.cfg.in_dim}): they must share the Wan 2.1 VAE latent space")
    z_dim = getattr(getattr(vae, "config", None), "z_dim", target.cfg.in_dim)
    if z_dim != target.cfg.in_dim:
        raise ValueError(f"VAE latent channels {z_dim} != DiT input channels {target.cfg.in_dim}")
    return keys


def to_image(pixels: torch.Tensor) -> torch.Tensor:
    """VAE pixels [1, 3, T, H, W] in [-1, 1] -> frames [T, H, W, 3] in 0..1 float32."""
    return (pixels[0].float().clamp(-1, 1) * 0.5 + 0.5).permute(1, 2, 3, 0)
