"""report.png reads on its own at any length: a y-axis title, the tau label beside the bars (not on them), no block
marker on the axis at 300 blocks, tau = +inf explained, a schedule's prompts named where they start. Synthetic
reports: fast, no generation."""
from __future__ import annotations

import math
import random

import pytest

from sdvg_core import BlockReport, RunReport, render_report_plot
from sdvg_core.engine.plot import COLORS, PlotStyle

STYLE = PlotStyle()
X0, X1 = STYLE.margin_left, STYLE.width - STYLE.margin_right
Y0, Y1 = STYLE.margin_top, STYLE.height - STYLE.margin_bottom
SCHEDULE = [{"first_block": 0, "text": "a red fox in the snow"}, {"first_block": 100, "text": "the fox runs into a forest"},
            {"first_block": 200, "text": "night falls over the forest"}]


def _report(n: int, tau: float, prompts: list[dict] | None = None, forced_all: bool = False) -> RunReport:
    rnd = random.Random(0)
    blocks = []
    for i in range(n):
        seg = max(k for k, p in enumerate(prompts or [{"first_block": 0}]) if p["first_block"] <= i)
        if i == 0 or forced_all:
            blocks.append(BlockReport(i, "target", "forced", None, [], {}, {}, {}, [], prompt=seg))
            continue
        s = rnd.uniform(-1.6, 0.4)
        ok = s >= tau
        blocks.append(BlockReport(i, "drafter" if ok else "target", "accepted" if ok else "rejected", s, [s], {}, {}, {},
                                  [], prompt=seg))
    acc = [b.decision == "accepted" for b in blocks]
    return RunReport("threshold", "krea", n, blocks, sum(acc[1:]) / (n - 1), sum(acc) / n, 10, 20, 10, 20, 7.4, 100.0,
                     150.0, 1.5, prompts=prompts or [{"first_block": 0, "text": "a corgi"}])


def _pixels(img, color, xs: range, ys: range, tol: int = 0) -> list[tuple[int, int]]:
    """Pixels within `tol` of `color` in every channel (text is anti-aliased: its core is near its colour)."""
    px = img.load()
    return [(x, y) for x in xs for y in ys if max(abs(a - b) for a, b in zip(px[x, y], color)) <= tol]


TEXT_TOL = 60  # anti-aliased glyph pixels this close to the text colour count as its ink


def test_300_blocks_keep_the_axis_clear_and_tau_labelled_beside_the_bars():
    img = render_report_plot(_report(300, -0.7), tau=-0.7)
    # block 0's forced stub and letter used to sit on the y axis and its tick labels (which end 6 px left of it)
    assert not _pixels(img, COLORS["forced"], range(0, X0), range(Y0, Y1))
    assert not _pixels(img, COLORS["forced"], range(X0 - 5, X0), range(Y0, Y1), TEXT_TOL)
    tau_in_plot = _pixels(img, COLORS["tau"], range(X0, X1), range(Y0, Y1))
    rows = {y for _, y in tau_in_plot}
    assert tau_in_plot and max(rows) - min(rows) <= 2  # only the dashed line itself inside the plot
    label = _pixels(img, COLORS["tau"], range(X1 + 1, STYLE.width), range(Y0, Y1), TEXT_TOL)
    assert len(label) > 20  # its label, in the margin


@pytest.mark.parametrize("n", [9, 60, 300])
def test_the_y_axis_has_a_title(n):
    img = render_report_plot(_report(n, -0.7), tau=-0.7)
    ink = _pixels(img, COLORS["axis"], range(0, 16), range(Y0, Y1), TEXT_TOL)
    # rotated text in the strip left of the tick values: ink down most of the plot's height (tick values, which
    # used to start in this strip, cover a few rows each)
    assert len({y for _, y in ink}) > 0.4 * (Y1 - Y0)


def test_tau_plus_inf_says_why_every_block_is_forced():
    img = render_report_plot(_report(9, math.inf, forced_all=True), tau=math.inf)
    note = _pixels(img, COLORS["text"], range(X0, X1), range(Y0 + 6, Y0 + 22), TEXT_TOL)
    assert len(note) > 100 and max(x for x, _ in note) - min(x for x, _ in note) > 300  # a line of text


def test_a_schedules_prompts_are_named_where_they_start():
    img = render_report_plot(_report(300, -0.7, SCHEDULE), tau=-0.7)
    slot = (X1 - X0) / 300
    band = range(Y0 - 16, Y0)
    for i, p in enumerate(SCHEDULE):  # text in the segment colour right after each prompt's first block
        start = int(X0 + slot * p["first_block"]) + 3
        ink = _pixels(img, COLORS["segment"], range(start, start + 100), band, TEXT_TOL)
        assert len({x for x, _ in ink}) > 40, (i, len(ink))


def test_a_run_whose_input_ended_early_says_where_it_stopped():
    """As after Ctrl-C: 'stopped at block N of M' under the title, and why (the input ended, or could not be read)."""
    import dataclasses

    from sdvg_core.engine.plot import summary_line

    done = _report(4, -0.7)
    ended = dataclasses.replace(done, stopped="the input video ends before block 4", stop_cause="input_ended",
                                blocks_requested=10)
    broken = dataclasses.replace(ended, stop_cause="input_unreadable")
    assert "stopped" not in summary_line(done)
    assert summary_line(ended).endswith("| stopped at block 4 of 10 (the input ended)")
    assert summary_line(broken).endswith("| stopped at block 4 of 10 (the input could not be read)")
    strip = (range(X0, STYLE.width), range(16, 30))  # the summary line's row
    assert len(_pixels(render_report_plot(ended, tau=-0.7), COLORS["axis"], *strip, TEXT_TOL)) > \
        len(_pixels(render_report_plot(done, tau=-0.7), COLORS["axis"], *strip, TEXT_TOL)) + 100  # the words drawn
