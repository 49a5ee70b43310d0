"""Calibrating a router on a cheaper decoder: the same drafts scored twice, once through the full Wan VAE (the
reference) and once through a tiny decoder (the candidate), compared block by block.

Pure functions on per-block scores (the router's aggregated score of each draft, e.g. min ImageReward over its
frames); no model, no ComfyUI. A block is accepted at tau when its score >= tau (the router's rule).

- `decision_agreement`: the fraction of blocks on which the two decoders make the same accept/reject decision.
- `pearson`, `spearman`: linear and rank correlation (ties take the average of the ranks they span).
- `matched_tau`: the candidate threshold with the reference's acceptance rate (quantile matching, below).
- `calibrate`: all of them for a list of taus.

Quantile matching rule. Sort each decoder's scores from high to low: r_1 >= r_2 >= ... and c_1 >= c_2 >= ....
A reference tau accepts k blocks, with r_{k+1} < tau <= r_k. The matched tau sits at the same fraction of the way
between c_{k+1} and c_k: c_{k+1} + (tau - r_{k+1}) / (r_k - r_{k+1}) * (c_k - c_{k+1}). Beyond the ends (k = 0 or
k = n) the end segment's line is extended: c_1 + (tau - r_1) * slope, slope = (c_1 - c_2) / (r_1 - r_2) (likewise
at the bottom), or slope 1 (a shift) where that segment has a tie or there is one block, so the matched tau stays
beyond the candidate's end and accepts none (or all) of its blocks too. The candidate then accepts k blocks
too, unless c_k == c_{k+1} (a tie across the boundary): no threshold separates tied scores, and all of them pass, so
the candidate accepts more than k. The map is exact for any increasing affine relation: if c = a r + b (a > 0) for
every block, the matched tau is a tau + b.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["average_ranks", "pearson", "spearman", "acceptance_rate", "decision_agreement", "matched_tau",
           "TauCalibration", "Calibration", "calibrate"]


def _vector(scores: Sequence[float] | torch.Tensor, what: str) -> torch.Tensor:
    x = torch.as_tensor(scores, dtype=torch.float64).flatten()
    if x.numel() == 0:
        raise ValueError(f"{what}: no scores")
    if not torch.isfinite(x).all():
        raise ValueError(f"{what}: scores must be finite (a block without a score has no place in a calibration)")
    return x


def _pair(reference, candidate) -> tuple[torch.Tensor, torch.Tensor]:
    r, c = _vector(reference, "reference"), _vector(candidate, "candidate")
    if r.shape != c.shape:
        raise ValueError(f"paired scores differ in length: reference {r.numel()}, candidate {c.numel()}")
    return r, c


def average_ranks(scores: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Ranks 1..n from the lowest score up; tied scores all take the mean of the ranks they span (float64)."""
    x = _vector(scores, "scores")
    order = torch.argsort(x, stable=True)
    sorted_x = x[order]
    ranks = torch.empty_like(x)
    start = 0
    n = x.numel()
    while start < n:
        end = start
        while end + 1 < n and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1  # positions start..end hold ranks start+1..end+1
        start = end + 1
    return ranks


def pearson(x: Sequence[float] | torch.Tensor, y: Sequence[float] | torch.Tensor) -> float:
    """Pearson correlation; NaN when either side has no spread (a constant score says nothing about order)."""
    a, b = _pair(x, y)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / denom if denom > 0 else math.nan


def spearman(x: Sequence[float] | torch.Tensor, y: Sequence[float] | torch.Tensor) -> float:
    """Spearman rank correlation: Pearson of the average ranks."""
    a, b = _pair(x, y)
    return pearson(average_ranks(a), average_ranks(b))


def acceptance_rate(scores: Sequence[float] | torch.Tensor, tau: float) -> float:
    """Fraction of blocks whose score >= tau."""
    x = _vector(scores, "scores")
    return float((x >= tau).double().mean())


def decision_agreement(reference, candidate, tau: float, candidate_tau: float | None = None) -> float:
    """Fraction of blocks on which (reference >= tau) equals (candidate >= candidate_tau); candidate_tau defaults to
    tau (the same threshold on both scales)."""
    r, c = _pair(reference, candidate)
    ct = tau if candidate_tau is None else candidate_tau
    return float(((r >= tau) == (c >= ct)).double().mean())


def matched_tau(reference, candidate, tau: float) -> float:
    """The candidate threshold that accepts as many blocks as `tau` does on the reference (module docstring)."""
    r, c = _pair(reference, candidate)
    if math.isnan(tau):
        raise ValueError("tau is NaN: give a number (or -inf / +inf)")
    if math.isinf(tau):
        return tau  # -inf accepts all, +inf none, on any scale
    r_desc = torch.sort(r, descending=True).values
    c_desc = torch.sort(c, descending=True).values
    n = r.numel()
    k = int((r >= tau).sum())  # accepted by the reference; r_desc[k-1] >= tau > r_desc[k]
    # Each result is kept on its side of the candidate's boundary scores: float rounding of the interpolation must
    # not move a score that sits exactly at the matched tau (tau = r_k gives c_k) to the other side.
    if k == 0:  # above every reference score: strictly above every candidate score
        top = float(c_desc[0])
        return max(top + (tau - float(r_desc[0])) * _end_slope(r_desc[:2], c_desc[:2]), math.nextafter(top, math.inf))
    if k == n:  # at or below every reference score: at or below every candidate score
        bottom = float(c_desc[-1])
        return min(bottom + (tau - float(r_desc[-1])) * _end_slope(r_desc[-2:], c_desc[-2:]), bottom)
    hi_r, lo_r = float(r_desc[k - 1]), float(r_desc[k])  # lo_r < tau <= hi_r, so hi_r > lo_r
    hi_c, lo_c = float(c_desc[k - 1]), float(c_desc[k])
    if hi_c == lo_c:  # a tie across the boundary: every tied score passes
        return hi_c
    value = lo_c + (tau - lo_r) / (hi_r - lo_r) * (hi_c - lo_c)
    return min(max(value, math.nextafter(lo_c, math.inf)), hi_c)  # in (c_{k+1}, c_k]: exactly k accepted


def _end_slope(r_pair: torch.Tensor, c_pair: torch.Tensor) -> float:
    """Slope of the candidate against the reference over the two outermost blocks (descending pairs); 1 when either
    pair is tied or there is a single block (extrapolating along a flat line would reach the candidate's end)."""
    if r_pair.numel() < 2:
        return 1.0
    dr, dc = float(r_pair[0] - r_pair[1]), float(c_pair[0] - c_pair[1])
    return dc / dr if dr > 0 and dc > 0 else 1.0


@dataclass(frozen=True)
class TauCalibration:
    """One reference tau and what the candidate does with it and with its matched tau."""

    tau: float
    matched_tau: float
    reference_acceptance: float  # fraction accepted by the reference at tau
    candidate_acceptance: float  # ... by the candidate at the same tau
    matched_acceptance: float  # ... by the candidate at matched_tau (equals reference_acceptance unless ties)
    agreement: float  # decisions equal at the same tau on both scales
    matched_agreement: float  # decisions equal with the candidate at matched_tau


@dataclass(frozen=True)
class Calibration:
    """Paired scores of the same drafts under two decoders, compared."""

    reference: tuple[float, ...]
    candidate: tuple[float, ...]
    pearson: float
    spearman: float
    taus: tuple[TauCalibration, ...]

    @property
    def blocks(self) -> int:
        return len(self.reference)

    def as_dict(self) -> dict:
        """JSON-ready (NaN correlations become None)."""
        def num(v: float) -> float | None:
            return None if math.isnan(v) else v

        return {"blocks": self.blocks, "pearson": num(self.pearson), "spearman": num(self.spearman),
                "taus": [vars(t) for t in self.taus]}


def calibrate(reference, candidate, taus: Sequence[float]) -> Calibration:
    """Correlations of the paired per-block scores and, for each reference tau, agreement and the matched tau."""
    r, c = _pair(reference, candidate)
    rows = []
    for tau in taus:
        m = matched_tau(r, c, tau)
        rows.append(TauCalibration(tau=float(tau), matched_tau=m, reference_acceptance=acceptance_rate(r, tau),
                                   candidate_acceptance=acceptance_rate(c, tau), matched_acceptance=acceptance_rate(c, m),
                                   agreement=decision_agreement(r, c, tau), matched_agreement=decision_agreement(r, c, tau, m)))
    return Calibration(reference=tuple(r.tolist()), candidate=tuple(c.tolist()), pearson=pearson(r, c),
                       spearman=spearman(r, c), taus=tuple(rows))
