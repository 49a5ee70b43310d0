"""The same drafts through two routing decoders: the paired scores a calibration (engine/calibration.py) compares.

Two engines over one memo, the same models but for the routing decoder: the reference (the VAE routes) makes the
history with its own decisions; at every block it drafts, the draft is decoded and scored by both, each decoder from
its own memory of the committed blocks (the draft is made once: its memo key does not name a decoder). What the
reference decides is what a run with the full VAE would commit, so the candidate is measured on the drafts a real run
meets. Each paired block also says what routing it cost with each decoder (decode + score seconds).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Callable

from .engine import Engine
from .policy import Policy, aggregate
from .state import GenerationSpec, GenerationState


@dataclass(frozen=True)
class PairedBlock:
    """One draft scored through both decoders."""

    block: int
    reference: float  # the policy's aggregate (min over frames by default) under the reference decoder
    candidate: float
    reference_frames: tuple[float, ...]
    candidate_frames: tuple[float, ...]
    decision: str  # the reference's decision (the history both decoders follow)
    reference_decode_s: float  # the draft's decode by each decoder, and its scoring (seconds, this process)
    candidate_decode_s: float
    reference_score_s: float
    candidate_score_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def paired_scores(reference: Engine, candidate: Engine, spec: GenerationSpec, policy: Policy,
                  on_block: Callable[[PairedBlock], None] | None = None) -> tuple[GenerationState, list[PairedBlock]]:
    """Route `spec` under `policy` on `reference`, scoring each draft the policy scores on both engines' routing
    decoders; (the final state, the paired blocks). The engines must share one memo and differ in the routing
    decoder only."""
    if candidate.memo is not reference.memo:
        raise ValueError("the reference and candidate engines must share one memo (the drafts are made once)")
    if candidate.keys.router == reference.keys.router:
        raise ValueError(f"both engines route on the same decoder ({reference.route_decoder}): give the candidate "
                         f"engine another routing decoder (route_vae)")
    if (candidate.target, candidate.drafter, candidate.vae, candidate.scorer) != (
            reference.target, reference.drafter, reference.vae, reference.scorer):
        raise ValueError("the reference and candidate engines must hold the same target, drafter, VAE and scorer")
    if reference.scorer is None or reference.drafter is None:
        raise ValueError("a calibration scores drafts: the engines need a drafter and an ImageReward scorer")
    paired: list[PairedBlock] = []
    state = reference.start(spec)
    try:
        while not state.done:
            b = state.next_block
            if policy.forced(b) or not policy.needs_score(b):
                state = reference.route(state, policy)
                continue
            drafted = reference.draft(state)
            if drafted.done:  # the block's input ended the run (video-to-video)
                state = drafted
                break
            ref, _ = reference.scored(drafted)
            cand, _ = candidate.scored(drafted)
            before, r, c = drafted.pending.account.seconds, ref.pending.account.seconds, cand.pending.account.seconds
            block = PairedBlock(
                block=b, reference=aggregate(ref.pending.frame_scores, policy.aggregation),
                candidate=aggregate(cand.pending.frame_scores, policy.aggregation),
                reference_frames=tuple(ref.pending.frame_scores), candidate_frames=tuple(cand.pending.frame_scores),
                decision="",  # set from the commit below
                reference_decode_s=r["decode"] + r["route_decode"] - before["decode"] - before["route_decode"],
                candidate_decode_s=c["decode"] + c["route_decode"] - before["decode"] - before["route_decode"],
                reference_score_s=r["score"] - before["score"], candidate_score_s=c["score"] - before["score"])
            state = reference.route(ref, policy)
            block = replace(block, decision=state.blocks[-1].decision)
            paired.append(block)
            if on_block is not None:
                on_block(block)
    finally:
        reference.release_run()
        candidate.release_run()
    return state, paired
