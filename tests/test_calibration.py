"""Calibrating the router on a cheaper decoder: decision agreement, Pearson / Spearman (average ranks for ties), the
quantile-matched tau, and the calibration plot, on constructed per-block scores."""
from __future__ import annotations

import math

import pytest
import torch

from sdvg_core import Calibration, calibrate, render_calibration_plot
from sdvg_core.engine.calibration import (
    acceptance_rate, average_ranks, decision_agreement, matched_tau, pearson, spearman,
)
from sdvg_core.engine.calibration_plot import COLORS, CalibrationStyle, axes_for

# Per-block scores of ten drafts under the full VAE (the reference); distinct, spread around the taus below.
FULL = [-1.3, -0.8, -0.45, -0.1, 0.05, 0.3, 0.62, 0.9, 1.25, 1.7]
TAUS = [-1.0, -0.2, 0.0, 0.4, 1.0]


def test_identical_scores_agree_everywhere():
    cal = calibrate(FULL, FULL, TAUS)
    assert isinstance(cal, Calibration) and cal.blocks == len(FULL)
    assert cal.pearson == pytest.approx(1.0) and cal.spearman == pytest.approx(1.0)
    for row in cal.taus:
        assert row.matched_tau == pytest.approx(row.tau, abs=1e-12)
        assert row.agreement == row.matched_agreement == 1.0
        assert row.reference_acceptance == row.candidate_acceptance == row.matched_acceptance


def test_a_shifted_scale_keeps_the_order_and_moves_tau_by_the_shift():
    tiny = [s + 0.5 for s in FULL]
    cal = calibrate(FULL, tiny, TAUS)
    assert cal.spearman == pytest.approx(1.0) and cal.pearson == pytest.approx(1.0)
    for row in cal.taus:
        assert row.matched_tau == pytest.approx(row.tau + 0.5, abs=1e-12)
        assert row.matched_agreement == 1.0 and row.matched_acceptance == row.reference_acceptance
    # the same tau on the tiny decoder's scale passes the blocks in [tau - 0.5, tau) too: decisions differ
    assert decision_agreement(FULL, tiny, 0.0) == pytest.approx(0.8)  # -0.45 and -0.1 pass on the tiny scale only
    assert min(row.agreement for row in cal.taus) < 1.0


def test_an_inverted_scale_has_rank_correlation_minus_one():
    cal = calibrate(FULL, [-s for s in FULL], TAUS)
    assert cal.spearman == pytest.approx(-1.0) and cal.pearson == pytest.approx(-1.0)


def test_matched_tau_is_exact_for_any_increasing_affine_map():
    tiny = [2.0 * s - 0.3 for s in FULL]
    for tau in TAUS + [-5.0, 5.0, FULL[3], FULL[0], FULL[-1]]:  # inside, beyond both ends, on a score
        assert matched_tau(FULL, tiny, tau) == pytest.approx(2.0 * tau - 0.3, abs=1e-12), tau


def test_matched_tau_gives_the_reference_acceptance_rate_on_continuous_scores():
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        full = torch.randn(37, generator=gen, dtype=torch.float64)
        tiny = 0.7 * full + 0.4 * torch.randn(37, generator=gen, dtype=torch.float64) + 1.0  # noisy, another scale
        for tau in torch.linspace(-2.5, 2.5, 11).tolist():
            m = matched_tau(full, tiny, tau)
            assert acceptance_rate(tiny, m) == acceptance_rate(full, tau), (tau, m)


def test_beyond_the_ends_and_infinite_taus():
    tiny = [s + 0.5 for s in FULL]
    assert matched_tau(FULL, tiny, 10.0) == pytest.approx(10.5)  # accepts none: the top segment's line extended
    assert matched_tau(FULL, tiny, -10.0) == pytest.approx(-9.5)  # accepts all: the bottom segment's line
    flat_top = [0.0, 1.0, 2.0, 2.0]  # the candidate's two best are tied: extend by a shift, staying above them
    assert matched_tau([0.0, 1.0, 2.0, 3.0], flat_top, 4.0) == pytest.approx(3.0)
    assert acceptance_rate(flat_top, 3.0) == 0.0
    assert matched_tau([1.0], [3.0], 2.0) == pytest.approx(4.0)  # one block: a shift
    assert matched_tau(FULL, tiny, math.inf) == math.inf and matched_tau(FULL, tiny, -math.inf) == -math.inf
    with pytest.raises(ValueError, match="NaN"):
        matched_tau(FULL, tiny, math.nan)


def test_tied_candidate_scores_at_the_boundary_all_pass():
    """No threshold separates tied scores: the matched tau lands on the tie and every tied block passes."""
    full = [0.0, 1.0, 2.0, 3.0]
    tiny = [0.0, 5.0, 5.0, 6.0]  # the 2nd and 3rd best are tied
    tau = 1.5  # the reference accepts 2 blocks (2.0, 3.0): the boundary falls between the tied 5.0s
    m = matched_tau(full, tiny, tau)
    assert m == pytest.approx(5.0)
    assert acceptance_rate(full, tau) == 0.5 and acceptance_rate(tiny, m) == 0.75
    assert matched_tau(full, tiny, 2.5) == pytest.approx(5.5)  # a boundary away from the tie: exact count (1 block)


def test_average_ranks_and_spearman_with_ties():
    assert average_ranks([3.0, 1.0, 2.0, 2.0]).tolist() == [4.0, 1.0, 2.5, 2.5]
    assert average_ranks([7.0, 7.0, 7.0]).tolist() == [2.0, 2.0, 2.0]
    # ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4]: 4.5 / sqrt(4.5 * 5)
    assert spearman([1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1.0, 2.0, 3.0, 4.0], [1.0, 4.0, 9.0, 16.0]) == pytest.approx(1.0)  # monotone, not linear
    assert pearson([1.0, 2.0, 3.0, 4.0], [1.0, 4.0, 9.0, 16.0]) < 0.99
    assert math.isnan(pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # no spread: undefined


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="differ in length"):
        calibrate([1.0, 2.0], [1.0], TAUS)
    with pytest.raises(ValueError, match="no scores"):
        calibrate([], [], TAUS)
    with pytest.raises(ValueError, match="finite"):
        pearson([1.0, math.nan], [1.0, 2.0])
    assert calibrate(FULL, FULL, [0.0]).as_dict()["taus"][0]["matched_tau"] == pytest.approx(0.0)
    assert calibrate([1.0, 1.0], [1.0, 2.0], [0.0]).as_dict()["pearson"] is None


# ----------------------------------------------------------------------------------------------------- the plot
def _near(img, x: float, y: float, color: tuple[int, int, int], radius: int = 1) -> bool:
    """Whether `color` is drawn within `radius` pixels of (x, y)."""
    px = img.load()
    return any(px[int(round(x)) + dx, int(round(y)) + dy] == color
               for dx in range(-radius, radius + 1) for dy in range(-radius, radius + 1))


def test_plot_draws_points_identity_and_both_tau_lines():
    tiny = [s + 0.5 for s in FULL]
    tau = 0.0
    style = CalibrationStyle()
    img = render_calibration_plot(FULL, tiny, tau=tau, style=style)
    assert img.size == (style.width, style.height) and img.mode == "RGB"
    m = matched_tau(FULL, tiny, tau)
    ax = axes_for(FULL, tiny, tau, m, style)
    for r, c in zip(FULL, tiny):  # every pair decided alike at the matched tau: all "agree"
        assert _near(img, ax.x_of(r), ax.y_of(c), COLORS["agree"]), (r, c)
    row = int(round(ax.y_of(m)))
    assert sum(img.getpixel((x, row)) == COLORS["matched"] for x in range(style.margin_left, style.margin_left
                                                                            + style.size)) > style.size // 3
    col = int(round(ax.x_of(tau)))
    assert sum(img.getpixel((col, y)) == COLORS["tau"] for y in range(style.margin_top, style.margin_top
                                                                      + style.size)) > style.size // 3
    diagonal = [(ax.x_of(v), ax.y_of(v)) for v in torch.linspace(ax.lo, ax.hi, 60).tolist()]
    assert sum(_near(img, x, y, COLORS["identity"]) for x, y in diagonal) > 20


def test_plot_marks_the_blocks_the_decoders_decide_differently():
    tiny = [s + 0.5 for s in FULL]
    img = render_calibration_plot(FULL, tiny, tau=0.0, matched=0.0)  # the unmatched tau: two decisions differ
    ax = axes_for(FULL, tiny, 0.0, 0.0)
    differing = [(r, c) for r, c in zip(FULL, tiny) if (r >= 0.0) != (c >= 0.0)]
    assert len(differing) == 2
    for r, c in differing:
        assert _near(img, ax.x_of(r), ax.y_of(c), COLORS["disagree"])
    plain = render_calibration_plot(FULL, tiny)  # no tau: no threshold lines, every point plain
    colours = {colour for _, colour in plain.getcolors(plain.width * plain.height)}
    assert COLORS["tau"] not in colours and COLORS["matched"] not in colours and COLORS["disagree"] not in colours
    with pytest.raises(ValueError, match="paired"):
        render_calibration_plot(FULL, tiny[:3])


def test_a_score_equal_to_tau_is_accepted_on_both_scales():
    """The router's rule is score >= tau: a block exactly at tau passes, under either decoder."""
    assert acceptance_rate([0.0, 1.0, 2.0], 1.0) == pytest.approx(2 / 3)
    assert decision_agreement(FULL, FULL, FULL[4]) == 1.0
    assert decision_agreement([1.0, 3.0], [2.0, 2.0], 1.0, candidate_tau=2.0) == 1.0
    for shift in (0.0, 0.5, 0.1, -0.3):  # a tau on a score maps onto that block's candidate score, not past it
        tiny = [s + shift for s in FULL]
        for k, tau in enumerate(sorted(FULL)):
            row = calibrate(FULL, tiny, [tau]).taus[0]
            assert row.reference_acceptance == row.matched_acceptance == (len(FULL) - k) / len(FULL), (shift, tau)
            assert row.matched_agreement == 1.0
