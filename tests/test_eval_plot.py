"""The Pareto plot reads on its own: a y-axis title, points that coincide are still each visible and labelled, and
matplotlib (when installed) and the PIL fallback draw the same layout. Fast: no sweep, synthetic points."""
from __future__ import annotations

import importlib.util
import itertools
import json

import pytest
from PIL import Image

from sdvg_eval.report import MARKER_R, PLOT_SIZE, PNG_KEY, Y_TITLE_X, layout, render_plot

# accept-all, draft-only and sdvg:-1.5 at the same spot (what hid two configs behind accept-all)
DATA = {"x": "speedup vs target-only (counted)", "y": "vr", "y_title": "VisionReward (vr)",
        "curves": {"sdvg": [[1.9, 0.0773, "sdvg:-0.7"], [2.4, 0.0740, "sdvg:-1.5"]],
                   "sdvg-mean": [[2.0, 0.0760, "sdvg-mean:-0.7"]]},
        "points": [[1.0, 0.0788, "target-only"], [2.4, 0.0740, "accept-all"], [2.4, 0.0740, "draft-only"],
                   [1.7, 0.0750, "random:0.73"]]}
NAMES = {"sdvg:-0.7", "sdvg:-1.5", "sdvg-mean:-0.7", "target-only", "accept-all", "draft-only", "random:0.73"}


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_coinciding_points_are_fanned_out_and_every_label_has_its_own_place():
    items = layout(DATA)
    assert {it["name"] for it in items} == NAMES and len(items) == len(NAMES)
    same = [it for it in items if it["name"] in ("accept-all", "draft-only", "sdvg:-1.5")]
    assert len({(it["X"], it["Y"]) for it in same}) == 1  # the true spot is shared
    for a, b in itertools.combinations(items, 2):  # no marker hides another, no label covers another
        assert (a["mx"] - b["mx"]) ** 2 + (a["my"] - b["my"]) ** 2 >= (2 * MARKER_R) ** 2, (a["name"], b["name"])
        assert not _overlap(a["label"], b["label"]), (a["name"], b["name"])
    markers = [(it["mx"] - MARKER_R, it["my"] - MARKER_R, it["mx"] + MARKER_R, it["my"] + MARKER_R) for it in items]
    for it in items:
        assert not any(_overlap(it["label"], m) for m in markers)  # no label covers a marker
        x0, y0, x1, y1 = it["label"]
        assert 0 <= x0 and x1 <= PLOT_SIZE[0] and 0 <= y0 and y1 <= PLOT_SIZE[1]


@pytest.mark.parametrize("use_matplotlib", [False, True], ids=["pil", "matplotlib"])
def test_both_renderers_draw_the_layout_and_a_y_axis_title(tmp_path, use_matplotlib):
    if use_matplotlib:
        pytest.importorskip("matplotlib", reason="matplotlib not installed (requirements-eval.txt)")
    path = render_plot(DATA, tmp_path / "p.png", use_matplotlib=use_matplotlib)
    img = Image.open(path)
    drawn = json.loads(img.text[PNG_KEY])
    assert drawn["layout"] == json.loads(json.dumps(layout(DATA)))
    rgb = img.convert("RGB")
    assert rgb.size == PLOT_SIZE
    for it in drawn["layout"]:  # each marker is painted in its colour where the layout put it
        want = tuple(int(it["color"][i:i + 2], 16) for i in (1, 3, 5))
        got = rgb.getpixel((round(it["mx"]), round(it["my"])))
        assert max(abs(a - b) for a, b in zip(got, want)) < 40, (it["name"], got, want)
    # the y-axis title: ink in the band left of the tick labels, over the middle of the plot's height
    h = PLOT_SIZE[1]
    band = [rgb.getpixel((x, y)) for x in range(Y_TITLE_X - 6, Y_TITLE_X + 7) for y in range(h // 3, 2 * h // 3)]
    assert sum(p != (255, 255, 255) for p in band) > 50


def test_a_zoomed_y_axis_says_how_narrow_it_is_and_a_single_tau_is_no_curve(tmp_path):
    """The paper's 0.0773 vs 0.0788 autoscaled to the full height looks large: the plot states the spread against
    target-only's value. A tau kind with one point is labelled as one tau, not as a curve."""
    from sdvg_eval.report import NOTE_Y, curve_label, zoom_note

    note = zoom_note(DATA)
    assert note == ("y axis zoomed (zero not shown): all 7 configs lie within 0.0048 of each other, 6.1% of "
                    "target-only's 0.0788")
    around_zero = {**DATA, "points": DATA["points"] + [[3.0, -0.02, "x"]]}
    assert zoom_note(around_zero) is None  # zero is on the axis: the picture is to scale
    assert curve_label("sdvg-mean", DATA["curves"]["sdvg-mean"]) == "sdvg-mean (one tau)"
    assert curve_label("sdvg", DATA["curves"]["sdvg"]) == "sdvg (tau curve)"
    for use_matplotlib in (False, True):
        if use_matplotlib and importlib.util.find_spec("matplotlib") is None:
            continue
        img = Image.open(render_plot({**DATA, "y_note": note}, tmp_path / "p.png", use_matplotlib=use_matplotlib))
        rgb = img.convert("RGB")
        red = [x for x in range(PLOT_SIZE[0]) for y in range(NOTE_Y - 6, NOTE_Y + 6)
               if max(abs(a - b) for a, b in zip(rgb.getpixel((x, y)), (0xb0, 0, 0))) < 60]
        assert len(red) > 100, use_matplotlib  # the note is drawn under the title
    from sdvg_eval.report import ConfigSummary, plot_points

    summ = [ConfigSummary("target-only", "target-only", None, 1, {"vr": 0.0788}, 9.7, True, None, 1.0, None),
            ConfigSummary("sdvg:-0.7", "sdvg", -0.7, 1, {"vr": 0.0773}, 6.1, True, 1.59, 1.6, 0.73)]
    assert plot_points(summ, "vr")["y_note"].endswith("1.9% of target-only's 0.0788")  # what pareto.png draws
