"""The router's work on a pending draft: decoded by the routing decoder from its committed memory (the VAE, or a
tiny decoder of its own: route_decoder.py), scored per frame by ImageReward in one batch, both memoised under keys
that name the routing decoder and the scorer. The decision itself is the policy's (policy.py)."""
from __future__ import annotations

from typing import Callable

from ..derived.keys import RunKeys
from ..derived.memo import Memoiser
from ..derived.tally import Tally
from .route_decoder import Decoders
from .state import GenerationState, PendingBlock


class Router:
    """Decode and score a state's pending draft (`tally()` makes each operation's account)."""

    def __init__(self, decoders: Decoders, scorer, keys: RunKeys, memoiser: Memoiser, tally: Callable[[], Tally],
                 to_image: Callable):
        self.decoders, self.scorer, self.keys, self.memoiser = decoders, scorer, keys, memoiser
        self._tally, self._to_image = tally, to_image

    def decode_draft(self, state: GenerationState) -> GenerationState:
        """The pending draft decoded from the committed decoder cache, which stays as it was (pending.frames)."""
        p = need_pending(state, "latents")
        if p.frames is not None:
            return state
        tally = self._tally()
        with tally.phase(self.decoders.draft_phase):  # by the routing decoder, from its committed memory
            entry = self.decoders.route.decode_draft(state, p.latents, self.keys.draft_decode(state), tally)
        return state.with_pending(p.then(tally.account(), frames=self._to_image(entry.pixels)))

    def score_draft(self, state: GenerationState) -> GenerationState:
        """ImageReward per frame of the decoded draft, all frames in one batch (pending.frame_scores)."""
        p = need_pending(state, "frames")
        if p.frame_scores is not None:
            return state
        if self.scorer is None:
            raise ValueError("this policy scores drafts, but the engine was built without an ImageReward scorer")
        tally = self._tally()
        key = self.keys.score(state)

        def score(part: Tally) -> tuple[float, ...]:
            scores = tuple(float(s) for s in self.scorer.score_frames(p.frames, key.prompt_text))
            part.add("scored_frames", len(scores))
            return scores

        with tally.phase("score"):
            scores = self.memoiser.memoised(key, "score", tally, score)
        return state.with_pending(p.then(tally.account(), frame_scores=scores))

    def scored(self, state: GenerationState) -> tuple[GenerationState, bool]:
        """The pending draft with its scores. Scores memoised by an earlier pass come without decoding the draft
        again (a re-run after moving tau: the prefix costs no decode but the commit's); returns whether the
        draft's decode was skipped."""
        p = state.pending
        if p.frame_scores is not None:
            return state, False
        if p.frames is None and self.scorer is not None:
            tally = self._tally()
            found = self.memoiser.recall((self.keys.score(state),), "score", tally)
            if found is not None:
                return state.with_pending(p.then(tally.account(), frame_scores=found[0])), True
        return self.score_draft(self.decode_draft(state)), False


def need_pending(state: GenerationState, what: str) -> PendingBlock:
    """The state's pending block, which must have `what` (latents, frames) computed; else what to do first."""
    p = state.pending
    if p is None or getattr(p, what) is None:
        need = {"latents": "draft the block first", "frames": "decode the draft first"}[what]
        raise ValueError(f"no pending {what} for block {state.next_block}: {need}")
    return p
