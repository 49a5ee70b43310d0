"""The SDVG engine: draft -> decode -> score -> route -> commit, over an immutable GenerationState.

Every operation takes a state and returns a new one. Derived data (per-prompt text K/V, KV caches,
decoder caches, anchors, drafts, scores, target blocks) lives in a bounded memo keyed by lineage, so a
re-run (e.g. after moving tau) recomputes only from the first block whose decision changed, and can never
read a cache built for another history.

Compute only what a decision needs: a forced block is not drafted; a score-blind policy does not score;
the target's KV cache is built only when the target generates; a draft is decoded from the committed
decoder cache without changing it (its result is kept for the commit, so an accepted draft is decoded
once). `EngineConfig(lazy=False)` does all the work the reference implementation does, for comparison;
outputs are bit-identical either way.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Protocol

import torch

from .memo import Memo
from .noise import BlockNoise, block_noise
from .policy import Policy, aggregate
from .recipes import KreaRecipe, Recipe, SelfForcingRecipe
from .schedule import add_noise, flow_to_x0, timestep_tensor
from .state import BlockRecord, GenerationSpec, GenerationState, PendingBlock, extend_lineage
from ..models.wan import CausalWan, KVCache, TextKV

DEFAULT_MEMO_BYTES = 2 << 30  # derived data kept for re-runs; a single bigger entry (a 14B KV cache) is not kept
PHASES = ("context", "draft", "decode", "score", "target")
WORK_KEYS = ("drafter_forwards", "target_forwards", "drafter_context_forwards", "target_context_forwards",
             "vae_decode_frames", "vae_encodes", "scored_frames")


class Scorer(Protocol):
    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        """frames [F, H, W, 3] in 0..1 -> per-frame rewards [F]."""


@dataclass(frozen=True)
class EngineConfig:
    recipe: Recipe = field(default_factory=KreaRecipe)
    decode_rule: str = "standard"  # "krea" reproduces the published numbers (Krea's VAE cache rule)
    memo_bytes: int = DEFAULT_MEMO_BYTES
    lazy: bool = True  # False: draft forced blocks, score every draft, rebuild the target cache every block


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
    """Host hooks: `interrupt()` raises to cancel (called before every model call); `progress(event)`."""

    interrupt: Callable[[], None] | None = None
    progress: Callable[[ProgressEvent], None] | None = None


@dataclass(frozen=True)
class DecodeEntry:
    """One block's decoded pixels [1, 3, T, H, W] (clamped to [-1, 1]) and the decoder cache after it."""


    pixels: torch.Tensor
    cache: Any  # vae.DecoderCache


class _Tally:
    """Counted work and seconds per phase for one block (mutable scratch, frozen into the record).

    `work` is what this call computed; `cost` adds the work of results taken from the memo (credited from
    when they were computed), i.e. what the block costs in a fresh run: the basis of counted speedups.
    """

    def __init__(self, device: torch.device):
        self.work = dict.fromkeys(WORK_KEYS, 0)
        self.cost = dict.fromkeys(WORK_KEYS, 0)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.reused: list[str] = []
        self._cuda = device.type == "cuda"

    def add(self, key: str, n: int = 1) -> None:
        self.work[key] += n
        self.cost[key] += n

    def credit(self, cost: dict[str, int]) -> None:
        for k, v in cost.items():
            self.cost[k] = self.cost.get(k, 0) + v

    def cost_since(self, before: dict[str, int]) -> dict[str, int]:
        return {k: v - before.get(k, 0) for k, v in self.cost.items() if v != before.get(k, 0)}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self._cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._cuda:
                torch.cuda.synchronize()
            self.seconds[name] += time.perf_counter() - t0

    def absorb(self, work: dict[str, int], cost: dict[str, int], seconds: dict[str, float], reused: tuple[str, ...]) -> None:
        for k, v in work.items():
            self.work[k] = self.work.get(k, 0) + v
        self.credit(cost)
        for k, v in seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.reused.extend(reused)


class Engine:
    """Holds the models, the recipe and the memo; its operations are pure functions of the state."""

    def __init__(self, target: CausalWan, vae, drafter: CausalWan | None = None, scorer: Scorer | None = None,
                 config: EngineConfig = EngineConfig(), noise_fn: Callable[[GenerationSpec, int], BlockNoise] | None = None,
                 tracer: Callable[[str, torch.Tensor], None] | None = None, memo: Memo | None = None):
        self.target, self.drafter, self.vae, self.scorer = target, drafter, vae, scorer
        self.config = config
        self.recipe: Recipe = config.recipe
        self.plan = self.recipe.plan
        # a host may share one memo between engines built per call (keys hold every model's identity)
        self.memo = memo if memo is not None else Memo(config.memo_bytes)
        self.noise_fn = noise_fn
        self.tracer = tracer
        self.callbacks = Callbacks()
        if config.decode_rule not in ("standard", "krea"):
            raise ValueError(f"decode_rule must be 'standard' or 'krea', got {config.decode_rule!r}")
        if drafter is not None and drafter.cfg.in_dim != target.cfg.in_dim:
            raise ValueError(f"drafter and target disagree on latent channels ({drafter.cfg.in_dim} vs "
                             f"{target.cfg.in_dim}): they must share the Wan 2.1 VAE latent space")
        z_dim = getattr(getattr(vae, "config", None), "z_dim", target.cfg.in_dim)
        if z_dim != target.cfg.in_dim:
            raise ValueError(f"VAE latent channels {z_dim} != DiT input channels {target.cfg.in_dim}")

    # ------------------------------------------------------------------------------------------ keys
    @staticmethod
    def _key(obj: Any) -> str:
        return getattr(obj, "key", None) or f"{type(obj).__name__}@{id(obj):x}"

    def _role(self, role: str) -> CausalWan:
        runner = self.drafter if role == "drafter" else self.target
        if runner is None:
            raise ValueError("this policy needs a drafter model, but the engine was built without one")
        return runner

    # ------------------------------------------------------------------------------------------ start
    def start(self, spec: GenerationSpec) -> GenerationState:
        """Validate the request against the models and return the empty state."""
        width = spec.prompt.embeddings.shape[-1]
        for role, runner in (("target", self.target), ("drafter", self.drafter)):
            if runner is not None and runner.cfg.text_dim != width:
                raise ValueError(f"prompt embeddings have width {width} but the {role} expects {runner.cfg.text_dim} "
                                 f"(umT5-XXL embeddings are 4096 wide: use a 'wan' text encoder)")
        if isinstance(self.recipe, SelfForcingRecipe) and self.recipe.window is not None \
                and self.recipe.window < spec.frames_per_block:
            raise ValueError(f"KV window of {self.recipe.window} frames cannot hold a block of {spec.frames_per_block}")
        return GenerationState(spec)

    # ------------------------------------------------------------------------------------------ basics
    def _noise(self, spec: GenerationSpec, b: int) -> BlockNoise:
        if self.noise_fn is not None:
            return self.noise_fn(spec, b)
        h, w = spec.latent_hw
        shape = (1, spec.frames_per_block, self.target.cfg.in_dim, h, w)
        return block_noise(spec.seed, b, shape, self.plan.num_renoise)

    def _trace(self, name: str, t: torch.Tensor) -> None:
        if self.tracer is not None:
            self.tracer(name, t)

    def _trace_kv(self, name: str, kv: KVCache, extra: int = 0) -> None:
        """Trace the first length+extra slots of every layer as [B, S, heads, head_dim] (reference layout)."""
        for i, (k, v) in enumerate(zip(kv.buffer.k, kv.buffer.v)):
            self._trace(f"{name}/layer{i}/k", k[:, :, : kv.length + extra].transpose(1, 2))
            self._trace(f"{name}/layer{i}/v", v[:, :, : kv.length + extra].transpose(1, 2))

    def _interrupt(self) -> None:
        if self.callbacks.interrupt is not None:
            self.callbacks.interrupt()

    def _text(self, runner: CausalWan, state: GenerationState) -> TextKV:
        key = ("text", self._key(runner), state.spec.prompt.key)
        text = self.memo.get(key)
        if text is None:
            text = self.memo.put(key, runner.encode_text(state.spec.prompt.embeddings))
        return text

    def _tokens_per_frame(self, runner: CausalWan, spec: GenerationSpec) -> int:
        h, w = spec.latent_hw
        return runner.cfg.tokens_per_frame(h, w)

    def _empty_kv(self, runner: CausalWan, spec: GenerationSpec) -> KVCache:
        window = self.recipe.window_frames(spec.frames_per_block, spec.num_latent_frames)
        return KVCache.empty(runner.cfg, batch=1, window_frames=window, tokens_per_frame=self._tokens_per_frame(runner, spec),
                             device=runner.device, dtype=runner.dtype)

    # ------------------------------------------------------------------------------------------ decoding
    def _pixels_before(self, b: int, spec: GenerationSpec) -> int:
        """Pixel frames decoded from the first b blocks (1 + 4(T-1) for T latent frames)."""
        return self.vae.config.pixel_frames(b * spec.frames_per_block)

    def _decode_latents(self, latents: torch.Tensor, cache) -> DecodeEntry:
        z = latents.permute(0, 2, 1, 3, 4)  # [1, F, C, h, w] -> [1, C, F, h, w]
        pixels, new_cache = self.vae.decode_stream(z, cache, rule=self.config.decode_rule)
        return DecodeEntry(pixels.clamp(-1, 1), new_cache)

    def _store_committed(self, state: GenerationState, b: int, entry: DecodeEntry) -> None:
        """Keep block b's pixels (on the CPU) and the decoder cache after it; the newest cache is pinned."""
        vkey, lineage = self._key(self.vae), state.blocks[b].lineage
        self.memo.put(("pixels", vkey, self.config.decode_rule, lineage), entry.pixels.to("cpu"))
        self.memo.pin("decoder_head", ("dcache", vkey, self.config.decode_rule, lineage), entry.cache)

    def _decoder_cache_after(self, state: GenerationState, b: int, tally: _Tally | None) -> Any:
        """Decoder cache after committed block b (None for b < 0), decoding forward from the newest kept one."""
        vkey, rule = self._key(self.vae), self.config.decode_rule
        start, cache = b, None
        while start >= 0:
            cache = self.memo.get(("dcache", vkey, rule, state.blocks[start].lineage))
            if cache is not None:
                break
            start -= 1
        for k in range(start + 1, b + 1):
            entry = self._decode_latents(state.blocks[k].latents, cache)
            self._store_committed(state, k, entry)
            cache = entry.cache
            if tally is not None:
                tally.add("vae_decode_frames", state.blocks[k].latents.shape[1])
        return cache

    def committed_pixels(self, state: GenerationState, b: int, tally: _Tally | None = None) -> torch.Tensor:
        """Decoded pixels of committed block b, [1, 3, T, H, W] in [-1, 1] on the CPU (memoised by lineage)."""
        key = ("pixels", self._key(self.vae), self.config.decode_rule, state.blocks[b].lineage)
        pixels = self.memo.get(key)
        if pixels is None:
            before = self._decoder_cache_after(state, b - 1, tally)
            entry = self._decode_latents(state.blocks[b].latents, before)
            self._store_committed(state, b, entry)
            pixels = entry.pixels.to("cpu")
            if tally is not None:
                tally.add("vae_decode_frames", state.blocks[b].latents.shape[1])
        return pixels

    def _decoder_cache_before(self, state: GenerationState, b: int, tally: _Tally):
        return self._decoder_cache_after(state, b - 1, tally)

    # ------------------------------------------------------------------------------------------ context
    def _anchor(self, state: GenerationState, b: int, tally: _Tally) -> torch.Tensor:
        """Krea's anchor for block b: the oldest kept decoded pixel frame, re-encoded -> [1, 1, C, h, w]."""
        key = ("anchor", self._key(self.vae), self.config.decode_rule, state.lineage_at(b))
        anchor = self.memo.get(key)
        if anchor is not None:
            tally.reused.append("anchor")
            return anchor
        spec = state.spec
        history = self.recipe.pixel_history(self.vae.config.temporal_compression)
        g = self._pixels_before(b, spec) - history  # global index of the oldest kept frame
        k = max(j for j in range(b) if self._pixels_before(j, spec) <= g)
        frame = self.committed_pixels(state, k, tally)[:, :, g - self._pixels_before(k, spec)]  # [1, 3, H, W]
        frame = frame.to(self.vae.device)
        self._trace(f"block{b}/anchor/pixel_frame", frame)
        latent = self.vae.encode_anchor_frame(frame, (spec.height, spec.width))  # [1, C, 1, h, w]
        tally.add("vae_encodes", 1)
        anchor = latent.permute(0, 2, 1, 3, 4).float()
        self._trace(f"block{b}/anchor/latent", anchor)
        return self.memo.put(key, anchor)

    def _krea_context(self, state: GenerationState, b: int, tally: _Tally) -> torch.Tensor:
        """Context latents [1, ctx, C, h, w]: frame 0 (latent 0 or the anchor) + the newest ctx-1 frames."""
        n = self.recipe.context_frames
        latents = state.committed_latents()[:, : b * state.spec.frames_per_block]
        if latents.shape[1] <= n or not self.recipe.anchor:
            first = latents[:, :1] if latents.shape[1] <= n else latents[:, -n:-n + 1]
        else:
            first = self._anchor(state, b, tally)
        return torch.cat([first, latents[:, latents.shape[1] - (n - 1):]], dim=1)

    def _context_kv(self, role: str, state: GenerationState, b: int, tally: _Tally) -> tuple[KVCache, int]:
        """The KV cache a model needs to generate block b, and the RoPE frame offset of the block."""
        runner = self._role(role)
        spec = state.spec
        F = spec.frames_per_block
        mkey = self._key(runner)
        if isinstance(self.recipe, KreaRecipe):
            if b == 0:
                return self._empty_kv(runner, spec), 0
            key = ("kv", mkey, "krea", state.lineage_at(b))
            kv = self.memo.get(key)
            if kv is not None:
                tally.reused.append(f"{role}_kv")
                return kv, self.recipe.context_frames
            ctx = self._krea_context(state, b, tally)
            self._trace(f"{role}/block{b}/context", ctx)
            self._interrupt()
            out = runner.forward(ctx, torch.zeros(1, ctx.shape[1]), self._text(runner, state), frame_offset=0,
                                 kv=self._empty_kv(runner, spec), commit=True, want_output=False)
            tally.add(f"{role}_forwards", 1)
            tally.add(f"{role}_context_forwards", 1)
            if self.tracer is not None:
                self._trace_kv(f"{role}/block{b}/recompute/kv", out.kv)
            return self.memo.put(key, out.kv), self.recipe.context_frames
        # Self-Forcing: extend the newest memoised prefix with clean t=0 forwards of the missing blocks
        j = b
        while j > 0 and self.memo.get(("kv", mkey, "sf", state.lineage_at(j))) is None:
            j -= 1
        kv = self.memo.get(("kv", mkey, "sf", state.lineage_at(j))) if j > 0 else self._empty_kv(runner, spec)
        if j == b and b > 0:
            tally.reused.append(f"{role}_kv")
        for k in range(j, b):
            self._interrupt()
            out = runner.forward(state.blocks[k].latents, timestep_tensor(0.0, 1, F), self._text(runner, state),
                                 frame_offset=k * F, kv=kv, commit=True, want_output=False)
            tally.add(f"{role}_forwards", 1)
            tally.add(f"{role}_context_forwards", 1)
            kv = self.memo.pin(f"kv_head:{mkey}", ("kv", mkey, "sf", state.lineage_at(k + 1)), out.kv)
        return kv, b * F

    # ------------------------------------------------------------------------------------------ generation
    def _generate(self, role: str, state: GenerationState, b: int, tally: _Tally) -> torch.Tensor:
        """Denoise block b with one model from the block's noise -> latents [1, F, C, h, w] (float32)."""
        memo_key = (role, self._key(self._role(role)), self.recipe.name, self.config.decode_rule, state.lineage_at(b))
        cached = self.memo.get(memo_key)
        if cached is not None:  # (latents, the cost of computing them)
            tally.reused.append(role)
            tally.credit(cached[1])
            return cached[0]
        before = dict(tally.cost)
        runner = self._role(role)
        spec, plan = state.spec, self.plan
        with tally.phase("context"):
            kv, offset = self._context_kv(role, state, b, tally)
        phase = "draft" if role == "drafter" else "target"
        with tally.phase(phase):
            text = self._text(runner, state)
            noise = self._noise(spec, b).to(runner.device)
            x = noise.initial
            x0 = x
            for s, t in enumerate(plan.timesteps):
                self._interrupt()
                ts = timestep_tensor(t, 1, spec.frames_per_block, runner.device)
                self._trace(f"{role}/block{b}/step{s}/model_input", x)
                flow = runner.forward(x, ts, text, frame_offset=offset, kv=kv).flow
                tally.add(f"{role}_forwards", 1)
                x0 = flow_to_x0(x.float(), flow.float(), plan.sigmas[s])
                self._trace(f"{role}/block{b}/step{s}/flow_pred", flow)
                self._trace(f"{role}/block{b}/step{s}/x0_pred", x0)
                if s + 1 < plan.num_steps:
                    x = add_noise(x0, noise.renoise[s], plan.sigmas[s + 1])
                if self.callbacks.progress is not None:
                    self.callbacks.progress(ProgressEvent("step", b, spec.num_blocks, role, s + 1, plan.num_steps))
            if self.tracer is not None:
                self._trace_kv(f"{role}/block{b}/kv_after_last_call", kv, extra=x.shape[1] * kv.tokens_per_frame)
        self.memo.put(memo_key, (x0, tally.cost_since(before)))
        return x0

    # ------------------------------------------------------------------------------------------ operations
    def draft(self, state: GenerationState) -> GenerationState:
        """Operation: the drafter proposes the next block (pending.latents)."""
        if state.done:
            raise ValueError("all blocks are committed; nothing to draft")
        b = state.next_block
        tally = _Tally(self._role("drafter").device)
        latents = self._generate("drafter", state, b, tally)
        return state.with_pending(PendingBlock(b, latents, work=tally.work, cost=tally.cost, seconds=tally.seconds,
                                               reused=tuple(tally.reused)))

    def decode_draft(self, state: GenerationState) -> GenerationState:
        """Operation: decode the pending draft from a copy of the committed decoder cache (pending.frames)."""
        p = self._need_pending(state, "latents")
        if p.frames is not None:
            return state
        tally = _Tally(self.vae.device)
        key = ("draft_decode", self._key(self.vae), self.config.decode_rule, self._key(self.drafter), state.lineage)
        with tally.phase("decode"):
            cached = self.memo.get(key)  # (entry, the cost of computing it)
            if cached is None:
                entry = self._decode_latents(p.latents, self._decoder_cache_before(state, p.index, tally))
                tally.add("vae_decode_frames", p.latents.shape[1])
                self.memo.put(key, (entry, {"vae_decode_frames": p.latents.shape[1]}))
            else:
                entry = cached[0]
                tally.credit(cached[1])
                tally.reused.append("draft_decode")
        frames = to_image(entry.pixels)
        return state.with_pending(_merge(p, tally, frames=frames))

    def score_draft(self, state: GenerationState) -> GenerationState:
        """Operation: ImageReward per frame of the decoded draft, all frames in one batch (pending.frame_scores)."""
        p = self._need_pending(state, "frames")
        if p.frame_scores is not None:
            return state
        if self.scorer is None:
            raise ValueError("this policy scores drafts, but the engine was built without an ImageReward scorer")
        tally = _Tally(self.vae.device)
        key = ("score", self._key(self.scorer), self._key(self.drafter), self.config.decode_rule, state.lineage, state.spec.prompt.text)
        with tally.phase("score"):
            cached = self.memo.get(key)  # (scores, the cost of computing them)
            if cached is None:
                scores = tuple(float(s) for s in self.scorer.score_frames(p.frames, state.spec.prompt.text))
                tally.add("scored_frames", len(scores))
                self.memo.put(key, (scores, {"scored_frames": len(scores)}))
            else:
                scores = cached[0]
                tally.credit(cached[1])
                tally.reused.append("score")
        return state.with_pending(_merge(p, tally, frame_scores=scores))

    def route(self, state: GenerationState, policy: Policy) -> GenerationState:
        """Operation: decide the pending block (computing only what the policy needs) and commit it."""
        if state.done:
            raise ValueError("all blocks are committed; nothing to route")
        b = state.next_block
        lazy = self.config.lazy
        forced = policy.forced(b)
        if not forced or (not lazy and self.drafter is not None):
            if state.pending is None:
                state = self.draft(state)
            if policy.needs_score(b) or (not lazy and self.scorer is not None):
                state = self.score_draft(self.decode_draft(state))
        p = state.pending or PendingBlock(b)
        tally = _Tally(self.target.device)
        tally.absorb(p.work, p.cost, p.seconds, p.reused)
        score = aggregate(p.frame_scores, policy.aggregation) if p.frame_scores else None
        accepted = (not forced) and policy.accept(b, score)
        if not lazy and b > 0 and isinstance(self.recipe, KreaRecipe):
            with tally.phase("context"):
                self._context_kv("target", state, b, tally)  # the reference rebuilds the target cache every block
        if accepted:
            latents, producer, decision = p.latents, "drafter", "accepted"
        else:
            latents, producer = self._generate("target", state, b, tally), "target"
            decision = "forced" if forced else "rejected"
        lineage = extend_lineage(state.lineage, latents, producer)
        vkey = self._key(self.vae)
        draft_entry = None
        if accepted and p.frames is not None:  # the draft's decode is the committed one: no second decode
            cached = self.memo.get(("draft_decode", vkey, self.config.decode_rule, self._key(self.drafter), state.lineage))
            draft_entry = cached[0] if cached is not None else None
        record = BlockRecord(index=b, latents=latents, producer=producer, decision=decision, score=score,
                             frame_scores=tuple(p.frame_scores or ()), work=dict(tally.work), cost=dict(tally.cost),
                             seconds=dict(tally.seconds), reused=tuple(tally.reused), lineage=lineage)
        new_state = state.commit(record)
        # decode the committed block now (needed for anchors, previews and the output anyway)
        with tally.phase("decode"):
            if draft_entry is not None:
                self._store_committed(new_state, b, draft_entry)
                self.committed_pixels(new_state, b, tally)
            else:
                decoded = tally.work["vae_decode_frames"]
                self.committed_pixels(new_state, b, tally)
                if tally.work["vae_decode_frames"] == decoded:  # kept from an earlier run; a fresh run decodes it
                    tally.credit({"vae_decode_frames": latents.shape[1]})
        record = replace(record, work=dict(tally.work), cost=dict(tally.cost), seconds=dict(tally.seconds))
        new_state = GenerationState(new_state.spec, state.blocks + (record,), None)
        if self.callbacks.progress is not None:
            preview = to_image(self.committed_pixels(new_state, b)[:, :, -1:])[0]
            self.callbacks.progress(ProgressEvent("block", b, state.spec.num_blocks, producer, preview=preview, record=record))
        return new_state

    def step(self, state: GenerationState, policy: Policy) -> GenerationState:
        """One block, start to commit."""
        return self.route(state, policy)

    def generate(self, spec: GenerationSpec, policy: Policy) -> GenerationState:
        state = self.start(spec)
        while not state.done:
            state = self.route(state, policy)
        return state

    # ------------------------------------------------------------------------------------------ outputs
    def frames(self, state: GenerationState) -> torch.Tensor:
        """All committed frames [T, H, W, 3] in 0..1 on the CPU (ComfyUI IMAGE layout)."""
        if not state.blocks:
            raise ValueError("no block committed yet")
        return torch.cat([to_image(self.committed_pixels(state, b)) for b in range(len(state.blocks))])

    def _need_pending(self, state: GenerationState, what: str) -> PendingBlock:
        p = state.pending
        if p is None or getattr(p, what) is None:
            need = {"latents": "draft the block first", "frames": "decode the draft first"}[what]
            raise ValueError(f"no pending {what} for block {state.next_block}: {need}")
        return p


def _sum(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}


def _merge(p: PendingBlock, tally: _Tally, **updates) -> PendingBlock:
    return replace(p, work=_sum(p.work, tally.work), cost=_sum(p.cost, tally.cost), seconds=_sum(p.seconds, tally.seconds),
                   reused=p.reused + tuple(tally.reused), **updates)


def to_image(pixels: torch.Tensor) -> torch.Tensor:
    """VAE pixels [1, 3, T, H, W] in [-1, 1] -> frames [T, H, W, 3] in 0..1 float32."""
    return (pixels[0].float().clamp(-1, 1) * 0.5 + 0.5).permute(1, 2, 3, 0)
