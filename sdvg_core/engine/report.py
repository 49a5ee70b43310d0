"""Per-run report: per-block scores, decisions and counted work; acceptance; counted-work speedup.

Forward counts are what each block costs in a fresh run (`BlockRecord.cost`: computed now or reused from
the memo); `recomputed_*` says what this particular run computed (less after a re-run at another tau).
Given the run id of the execution building the report, every block says whether this execution computed
it (`computed_now`): a block whose record carries another run id came from a host's own cache (ComfyUI's
node cache after Cancel + re-queue), so its seconds are an earlier run's and its work is not recomputed.
Counted work is in drafter-forward units: a target forward costs `cost_ratio` drafter forwards (default
7.4, the 1.3B:14B ratio at 832x480, docs/design.md §5). The target-only baseline of the same recipe is
counted, not run: Krea rebuilds the target cache before every block but the first (1 + steps per block),
Self-Forcing commits every block but the last with a clean forward. `compiled` says whether either DiT ran
under torch.compile (`compiled_models`: which role, with which backend), as CausalWan(compile=...) was built.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..given.request import MODES, timing_words
from .policy import Policy
from .policy_names import spec_of
from .recipes import Recipe, recipe_spec
from .route_decoder import WAN_VAE
from .state import GenerationState

DEFAULT_COST_RATIO = 7.4  # target (14B) forward / drafter (1.3B) forward at 832x480 (docs/design.md §5)
DEFAULT_COMPILE_BACKEND = "inductor"  # what CausalWan(compile=True) compiles with (torch.compile's default)


def compile_backend(model: object | None) -> str | None:
    """The torch.compile backend a DiT was built with (`CausalWan(compile=True | "backend")`), or None when
    it runs eager (or is absent)."""
    flag = getattr(model, "compile", False) if model is not None else False
    if flag is True:
        return DEFAULT_COMPILE_BACKEND
    return str(flag) if flag else None


def compiled_models(target: object | None, drafter: object | None = None) -> dict[str, str]:
    """{role: backend} of the roles whose DiT is compiled (empty: everything eager)."""
    found = {role: compile_backend(m) for role, m in (("target", target), ("drafter", drafter))}
    return {role: backend for role, backend in found.items() if backend is not None}


@dataclass(frozen=True)
class BlockReport:
    index: int
    producer: str
    decision: str
    score: float | None
    frame_scores: list[float]
    work: dict[str, int]  # computed by this run
    cost: dict[str, int]  # the block's work in a fresh run
    seconds: dict[str, float]  # measured when the block was computed (an earlier run's when not computed_now)
    reused: list[str]  # results taken from the memo (within this execution too)
    run_id: str = ""  # the execution that computed the block
    computed_now: bool = True  # computed by the execution that built this report (False: from a host cache)
    carried: list[str] = field(default_factory=list)  # reused results an EARLIER execution computed
    prompt: int = 0  # index of the block's prompt in RunReport.prompts (its segment of the schedule)
    latent_frames: int = 0  # the block's latent frames (frames_per_block; a short last block fewer)


@dataclass(frozen=True)
class RunReport:
    policy: str
    recipe: str
    num_blocks: int
    blocks: list[BlockReport]
    acceptance_blocks_1_to_n: float | None  # accepted / (N-1) over blocks 1..N-1 (the paper's figure)
    acceptance_all_blocks: float  # accepted / N
    drafter_forwards: int  # fresh-run counts (the basis of the counted speedup)
    target_forwards: int
    recomputed_drafter_forwards: int  # what this run computed
    recomputed_target_forwards: int
    cost_ratio: float
    counted_cost: float  # drafter-forward units
    target_only_cost: float
    counted_speedup: float  # target_only_cost / counted_cost
    seconds: dict[str, float] = field(default_factory=dict)  # per phase, blocks computed now only
    wall_seconds: float | None = None
    meta: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None  # the execution that built this report (None: every block counts as computed now)
    blocks_from_earlier_runs: int = 0  # blocks this execution did not compute (taken from a host's cache)
    fresh_run: bool = True  # every block and every part of it was computed by this execution (wall = a fresh run's time)
    prompts: list[dict] = field(default_factory=list)  # the schedule: [{"first_block": n, "text": ...}, ...]
    # given pixels (docs/pixels.md): {"mode", "strength", "given_frames", "digest", "source_fps", "frame_rate"};
    # None for text-to-video
    pixels: dict | None = None
    stopped: str | None = None  # why the run ended before its requested blocks (an input video ran out or broke)
    stop_cause: str | None = None  # what stopped it: "input_ended" / "input_unreadable" (None: not stopped early)
    blocks_requested: int | None = None  # the blocks the run was asked for (num_blocks: those it committed)
    compiled: bool = False  # either DiT ran under torch.compile
    compiled_models: dict[str, str] = field(default_factory=dict)  # {role: torch.compile backend} of compiled DiTs
    policy_name: str | None = None  # the policy in the one grammar (`sdvg:tau=-0.7`, `stride:k=2`; engine/policy_names)
    tau: float | None = None  # the threshold of an SDVG policy (None for policies that read no score)
    live: dict | None = None  # a live run's timeline (sdvg_core/live/timeline.py): each block's settings; None otherwise
    frames_per_block: int = 3  # latent frames of a whole block (the last one may hold fewer: blocks[i].latent_frames)
    route_decoder: str = WAN_VAE  # the decoder whose frames the scorer saw: "wan_vae" or "taehv:<name>"
    output_decoder: str = WAN_VAE  # the decoder of the committed video (the routing decoder for a fast preview)
    route_decode_frames: int = 0  # fresh-run latent frames a routing decoder other than the VAE decoded
    vae_decode_frames: int = 0  # fresh-run latent frames the VAE decoded (with wan_vae routing: the drafts' too)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(asdict(self), indent=indent)

    def table(self) -> str:
        """A fixed-width per-block table plus the totals, for terminals and ComfyUI text outputs.

        `now` says per block whether this execution computed it (yes / part: some results came from the memo /
        no: the whole block came from an earlier run, e.g. ComfyUI's node cache, and its seconds are that run's).
        """
        segments = len(self.prompts) > 1
        lines = [f"policy: {self.policy} | recipe: {self.recipe}"]
        if self.pixels is not None:
            px = self.pixels
            strength = f" strength {px['strength']:g}" if MODES[px["mode"]].takes_strength else ""
            lines.append(f"pixels in: {px['mode']}{strength}, {px['given_frames']} given frame(s){timing_words(px)}")
        if segments:
            lines += [f"prompt {i} from block {p['first_block']}: {p['text']}" for i, p in enumerate(self.prompts)]
        given = self.pixels is not None  # reading + encoding the input: its own column (phase "input")
        lines.append(f"{'block':>5} " + (f"{'prompt':>6} " if segments else "") + f"{'producer':>8} {'decision':>8} "
                     f"{'min/agg':>8} {'frames(min..max)':>18} {'D fw':>4} {'T fw':>4} {'secs':>8} "
                     + (f"{'input':>7} " if given else "") + f"{'now':>4} reused")
        for b in self.blocks:
            fs = f"{min(b.frame_scores):+.3f}..{max(b.frame_scores):+.3f}" if b.frame_scores else "-"
            sc = f"{b.score:+.3f}" if b.score is not None else "-"
            now = "no" if not b.computed_now else ("part" if b.carried else "yes")
            secs = f"{sum(b.seconds.values()):.3f}" + ("*" if not b.computed_now else "")
            reused = ",".join(b.reused) if b.computed_now else "whole block (earlier run)"
            inp = f"{b.seconds.get('input', 0.0):>7.3f} " if given else ""
            lines.append(f"{b.index:>5} " + (f"{b.prompt:>6} " if segments else "") + f"{b.producer:>8} {b.decision:>8} {sc:>8} {fs:>18} "
                         f"{b.cost.get('drafter_forwards', 0):>4} {b.cost.get('target_forwards', 0):>4} "
                         f"{secs:>8} {inp}{now:>4} {reused or '-'}")
        if self.blocks_from_earlier_runs:
            lines.append(f"* {self.blocks_from_earlier_runs} block(s) were not computed by this run: they came from "
                         f"ComfyUI's cache of an earlier run (e.g. before Cancel); their seconds are that run's")
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        acc = "-" if self.acceptance_blocks_1_to_n is None else f"{self.acceptance_blocks_1_to_n:.1%}"
        lines.append(f"acceptance blocks 1..N-1: {acc} | all N blocks: {self.acceptance_all_blocks:.1%}")
        lines.append(f"forwards a fresh run makes: drafter {self.drafter_forwards}, target {self.target_forwards} | counted cost "
                     f"{self.counted_cost:.1f} vs target-only {self.target_only_cost:.1f} (1:{self.cost_ratio:g}) "
                     f"-> counted speedup {self.counted_speedup:.2f}x")
        if (self.recomputed_drafter_forwards, self.recomputed_target_forwards) != (self.drafter_forwards, self.target_forwards):
            lines.append(f"this run recomputed drafter {self.recomputed_drafter_forwards}, target "
                         f"{self.recomputed_target_forwards} forwards (the rest came from the cache)")
        lines.append(compiled_line(self.compiled_models))
        if (self.route_decoder, self.output_decoder) != (WAN_VAE, WAN_VAE):  # the default says nothing new
            lines.append(f"routing decoder: {self.route_decoder} ({self.route_decode_frames} latent frames, "
                         f"{self.seconds.get('route_decode', 0.0):.2f} s) | output decoder: {self.output_decoder} "
                         f"(VAE: {self.vae_decode_frames} latent frames, {self.seconds.get('decode', 0.0):.2f} s)")
        if self.wall_seconds is not None:
            line = f"wall {self.wall_seconds:.2f} s; phases " + ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items())
            if not self.fresh_run:
                line += ("\nNOT a fresh run's time: results of an earlier run were taken from the cache (see 'now'); compare "
                         "times only between runs that computed everything, or compare the counted cost above")
            lines.append(line)
        return "\n".join(lines)


def compiled_line(models: dict[str, str]) -> str:
    """`compiled: target (inductor), drafter (inductor)` or `compiled: no (eager DiTs)`."""
    if not models:
        return "compiled: no (eager DiTs)"
    return "compiled: " + ", ".join(f"{role} ({backend})" for role, backend in models.items())


def target_only_forwards(recipe: Recipe, num_blocks: int, steps: int, switches: int = 0) -> int:
    """Target forwards of the target-only baseline: the steps of every block plus one context forward per
    block after the first (Krea: a cache rebuild before it; Self-Forcing: the clean commit of the block
    before it, made lazily, so none follows the last block), plus a recipe's recache at each prompt switch."""
    return num_blocks * steps + recipe.context_forwards(num_blocks, switches)


def reference_forwards(recipe: Recipe, rejected: list[bool], steps: int) -> tuple[int, int]:
    """(drafter, target) forwards of the reference SDVG loop (spec-video-gen) for a decision pattern.

    The reference drafts every block (block 0 too), rebuilds both caches before every block but the
    first, and runs the target's steps on every rejected block. Only the Krea recipe has a reference.
    """
    if not recipe.has_reference_sdvg:
        raise ValueError("the reference SDVG implementation exists for the Krea recipe only")
    n = len(rejected)
    drafter = n * steps + (n - 1)
    target = (n - 1) + steps * sum(rejected)
    return drafter, target


def recipe_label(target: Recipe, drafter: Recipe | None = None) -> str:
    """`krea` when both roles run the same recipe, else `drafter longlive / target krea`."""
    if drafter is None or drafter == target:
        return recipe_spec(target)
    return f"drafter {recipe_spec(drafter)} / target {recipe_spec(target)}"


def build_report(state: GenerationState, policy: Policy | str, recipe: Recipe, steps: int,
                 cost_ratio: float = DEFAULT_COST_RATIO, wall_seconds: float | None = None,
                 meta: dict[str, str] | None = None, run_id: str | None = None,
                 drafter_recipe: Recipe | None = None, compiled: dict[str, str] | None = None,
                 live: dict | None = None, route_decoder: str = WAN_VAE, output_decoder: str = WAN_VAE) -> RunReport:
    """The report of `state` under `policy` (its description, name and tau come from it; a string is a description
    alone, for tests and custom policies). `recipe`/`steps` are the target's (the target-only baseline is counted with them);
    `drafter_recipe` only labels the run. `run_id`: the execution building it; blocks whose record carries
    another run id are marked as not computed now, and their work does not count as recomputed. `compiled`:
    {role: backend} of the compiled DiTs (`compiled_models(engine.target, engine.drafter)`); a role that made no
    forward in this run (the drafter of a target-only run) is left out. `route_decoder` / `output_decoder`: the
    engine's (`Engine.route_decoder`, `Engine.output_decoder`)."""
    blocks = [BlockReport(b.index, b.producer, b.decision, b.score, list(b.frame_scores), dict(b.work), dict(b.cost),
                          {k: round(v, 6) for k, v in dict(b.seconds).items()}, list(b.reused),
                          run_id=b.run_id, computed_now=run_id is None or b.run_id == run_id, carried=list(b.carried),
                          prompt=state.spec.segment_of(b.index), latent_frames=int(b.latents.shape[1]))
              for b in state.blocks]
    n = len(blocks)
    now = [b for b in blocks if b.computed_now]
    accepted = [b.decision == "accepted" for b in blocks]
    d_fw = sum(b.cost.get("drafter_forwards", 0) for b in blocks)
    t_fw = sum(b.cost.get("target_forwards", 0) for b in blocks)
    cost = d_fw + cost_ratio * t_fw
    base = cost_ratio * target_only_forwards(recipe, n, steps, sum(first < n for first, _ in state.spec.schedule.switches))
    forwards = {"drafter": d_fw, "target": t_fw}  # a compiled model that made no forward did not run compiled
    ran_compiled = {role: backend for role, backend in (compiled or {}).items() if forwards.get(role, 0) > 0}
    seconds: dict[str, float] = {}
    for b in now:
        for k, v in b.seconds.items():
            seconds[k] = round(seconds.get(k, 0.0) + v, 6)
    spec = None if isinstance(policy, str) else spec_of(policy)
    return RunReport(
        policy=policy if isinstance(policy, str) else policy.describe(), recipe=recipe_label(recipe, drafter_recipe), num_blocks=n, blocks=blocks,
        acceptance_blocks_1_to_n=(sum(accepted[1:]) / (n - 1)) if n > 1 else None,
        acceptance_all_blocks=sum(accepted) / n if n else 0.0,
        drafter_forwards=d_fw, target_forwards=t_fw,
        recomputed_drafter_forwards=sum(b.work.get("drafter_forwards", 0) for b in now),
        recomputed_target_forwards=sum(b.work.get("target_forwards", 0) for b in now),
        cost_ratio=cost_ratio, counted_cost=cost,
        target_only_cost=base, counted_speedup=base / cost if cost else float("inf"),
        seconds=seconds, wall_seconds=wall_seconds, meta=dict(meta or {}), run_id=run_id,
        blocks_from_earlier_runs=n - len(now),
        fresh_run=len(now) == n and not any(b.carried for b in blocks),
        prompts=[{"first_block": first, "text": p.text} for first, p in state.spec.schedule],
        pixels=None if state.spec.pixels is None else state.spec.pixels.report(state.given_frames),
        stopped=state.stopped, stop_cause=state.stop_cause, blocks_requested=state.spec.num_blocks,
        compiled=bool(ran_compiled), compiled_models=ran_compiled, frames_per_block=state.spec.frames_per_block,
        policy_name=None if spec is None else spec.name, tau=None if spec is None else spec.tau, live=live,
        route_decoder=route_decoder, output_decoder=output_decoder,
        route_decode_frames=sum(b.cost.get("route_decode_frames", 0) for b in blocks),
        vae_decode_frames=sum(b.cost.get("vae_decode_frames", 0) for b in blocks))
