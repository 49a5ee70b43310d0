"""SDVG against StrideAR at equal counted cost: for each stride:k point of a sweep, SDVG's quality at the same
counted cost, interpolated on its tau curve (SDVG's claim against a score-blind router is quality at equal cost).

Computed from the summary's per-config means only (sdvg_eval/report.py), so any results folder can be compared.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .config import STRIDE_KIND
from .summary import ConfigSummary


EQUAL_COST_CURVE = "sdvg"  # the tau curve StrideAR points are compared with (the paper's min-over-frames router)


@dataclass(frozen=True)
class EqualCost:
    """A StrideAR point and SDVG's quality at the same counted cost, interpolated on the tau curve.

    Counted cost is relative to target-only (1 / counted speedup); between two taus the metric is interpolated
    linearly in that cost. `sdvg_value` is None when the stride point's cost lies outside the curve's range."""

    stride: str
    speedup: float  # the stride point's counted speedup (the same for SDVG's interpolated point)
    metric: str
    stride_value: float
    sdvg_value: float | None
    between: tuple[str, ...]  # the tau configs the SDVG value lies between (one when a tau has the same cost)
    curve_range: tuple[float, float] | None  # the tau curve's counted speedups, lowest and highest

    @property
    def difference(self) -> float | None:
        """SDVG minus StrideAR at equal cost (> 0: SDVG is better at this cost, for a higher-is-better metric)."""
        return None if self.sdvg_value is None else self.sdvg_value - self.stride_value


def equal_cost(summ: list[ConfigSummary], metrics: list[str], curve: str = EQUAL_COST_CURVE) -> list[EqualCost]:
    """For each StrideAR point and metric: SDVG's value at the same counted cost on the `curve` kind's tau points."""
    taus = sorted(((1 / s.speedup_counted, s) for s in summ if s.kind == curve and s.speedup_counted > 0),
                  key=lambda t: t[0])
    out = []
    for st in (s for s in summ if s.kind == STRIDE_KIND):
        cost = 1 / st.speedup_counted
        for m in metrics:
            value, between = _on_curve(taus, cost, m)
            span = (taus[-1][1].speedup_counted, taus[0][1].speedup_counted) if taus else None
            out.append(EqualCost(st.config, st.speedup_counted, m, st.metrics[m], value, between, span))
    return out


def _on_curve(taus: list[tuple[float, ConfigSummary]], cost: float, metric: str) -> tuple[float | None, tuple[str, ...]]:
    """The metric at `cost` on the tau points sorted by cost: linear between the two neighbours, exact at a point.
    Taus of the same cost (every draft accepted at both) count once, the best of them (the curve's upper edge)."""
    best: list[tuple[float, ConfigSummary]] = []
    for c, s in taus:
        if best and math.isclose(best[-1][0], c, rel_tol=1e-9):
            if s.metrics[metric] > best[-1][1].metrics[metric]:
                best[-1] = (c, s)
        else:
            best.append((c, s))
    taus = best
    for c, s in taus:
        if math.isclose(c, cost, rel_tol=1e-9):
            return s.metrics[metric], (s.config,)
    for (c0, s0), (c1, s1) in zip(taus, taus[1:]):
        if c0 < cost < c1:
            w = (cost - c0) / (c1 - c0)
            return s0.metrics[metric] + w * (s1.metrics[metric] - s0.metrics[metric]), (s0.config, s1.config)
    return None, ()


def equal_cost_lines(rows: list[EqualCost]) -> list[str]:
    """The markdown section comparing each StrideAR point with SDVG at the same counted cost (none without stride
    configs)."""
    if not rows:
        return []
    lines = ["", "## SDVG vs StrideAR at equal counted cost", "",
             f"Each stride:k point against SDVG ({EQUAL_COST_CURVE}, min over frames) at the same counted cost, "
             f"interpolated linearly in counted cost (1 / counted speedup) between the two nearest taus of the sweep. "
             f"SDVG's claim against StrideAR is quality at equal cost: a positive difference is SDVG ahead.", "",
             "| config | counted speedup | metric | StrideAR | SDVG at that cost | SDVG - StrideAR | SDVG from |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.sdvg_value is None:
            where = ("no sdvg:TAU configs in this sweep" if r.curve_range is None else
                     f"outside the tau curve ({r.curve_range[0]:.2f}x..{r.curve_range[1]:.2f}x): add taus that reach it")
            lines.append(f"| {r.stride} | {r.speedup:.2f}x | {r.metric} | {r.stride_value:.4f} | - | - | {where} |")
        else:
            lines.append(f"| {r.stride} | {r.speedup:.2f}x | {r.metric} | {r.stride_value:.4f} | {r.sdvg_value:.4f} | "
                         f"{r.difference:+.4f} | {' .. '.join(r.between)} |")
    return lines
