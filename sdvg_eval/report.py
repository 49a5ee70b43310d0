"""The summary of a results folder: the paper-shaped markdown table, the sweep saving, and a Pareto plot PNG.

    python -m sdvg_eval.report OUT        # reads OUT/rows.csv, writes OUT/summary.md, OUT/units.csv, OUT/pareto.png

Every number comes from rows.csv; the PNG carries the plotted points as a text chunk (`sdvg-points`, JSON) so
a reader (and the tests) can check the picture against the table.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import (BASELINE_KINDS, CURVE_KINDS, PLOT_FILE, RUN_FILE, SPEEDUP_BASELINE, STRIDE_KIND, SUMMARY_FILE,
                     UNITS_FILE, parse_config)
from .equal_cost import equal_cost, equal_cost_lines
from .summary import ConfigSummary
from .metrics import IMAGEREWARD_NOTE, ImageRewardMean
from .records import UNIT_COLUMNS, metric_columns, read_rows

PNG_KEY = "sdvg-points"  # PNG text chunk holding the plotted points
PLOT_SIZE = (900, 600)  # pixels (PIL path); matplotlib uses the same at 100 dpi
ACCEPT_ALL = "accept-all"  # the "block 0 from the target, accept the rest" baseline every policy is compared with


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarise(rows: list[dict], metrics: list[str]) -> list[ConfigSummary]:
    """Per config: metric means, mean seconds, speedups vs target-only (measured and counted), acceptance 1..N-1."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    base = by.get(SPEEDUP_BASELINE)
    base_s = _mean([float(r["time_s"]) for r in base]) if base else None
    base_fresh = bool(base) and all(r["fresh_time"] == "1" for r in base)
    out = []
    for name, rs in by.items():
        c = parse_config(name)
        secs = _mean([float(r["time_s"]) for r in rs])
        bcols = [k for k in rs[0] if k.startswith("b") and k[1:].isdigit()]
        decisions = [int(r[k]) for r in rs for k in bcols if r[k] != ""]
        counted = sum(float(r["target_only_cost"]) for r in rs) / sum(float(r["counted_cost"]) for r in rs)
        fresh = all(r["fresh_time"] == "1" for r in rs)
        out.append(ConfigSummary(  # a measured speedup only between fresh-run times
            name, c.series, c.value, len(rs), {m: _mean([float(r[m]) for r in rs]) for m in metrics}, secs,
            fresh, base_s / secs if fresh and base_fresh and secs else None, counted,
            sum(decisions) / len(decisions) if decisions else None))
    order = {k: i for i, k in enumerate(("target-only", "draft-only", "accept-all", "random", STRIDE_KIND, "sdvg",
                                         "sdvg-mean"))}
    base = lambda s: s.kind.partition("@")[0]  # noqa: E731  (a tiny-decoder router after its kind's curve)
    return sorted(out, key=lambda s: (order[base(s)], s.kind, (s.value or 0) if s.kind == STRIDE_KIND else
                                      -(s.value or 0)))


@dataclass(frozen=True)
class UnitSaving:
    """Forwards a (prompt, seed) unit computed vs what a naive sweep (one fresh run per config) computes."""

    prompt_id: int
    seed: int
    configs: int
    computed_forwards: int
    naive_forwards: int
    computed_cost: float
    naive_cost: float

    @property
    def saving(self) -> float:
        return 1 - self.computed_cost / self.naive_cost if self.naive_cost else 0.0


def unit_savings(rows: list[dict]) -> list[UnitSaving]:
    """Per unit, from the rows' computed (`computed_*`) and fresh-run (`*_forwards`, `counted_cost`) counts."""
    by: dict[tuple[int, int], list[dict]] = {}
    for r in rows:
        by.setdefault((int(r["prompt"]), int(r["seed"])), []).append(r)
    return [UnitSaving(p, s, len(rs),
                       sum(int(r["computed_drafter_forwards"]) + int(r["computed_target_forwards"]) for r in rs),
                       sum(int(r["drafter_forwards"]) + int(r["target_forwards"]) for r in rs),
                       sum(float(r["computed_cost"]) for r in rs), sum(float(r["counted_cost"]) for r in rs))
            for (p, s), rs in sorted(by.items())]


def _f(v: float | None, fmt: str = ".4f") -> str:
    return "-" if v is None else format(v, fmt)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def markdown(summ: list[ConfigSummary], metrics: list[str], savings: list[UnitSaving], run: dict) -> str:
    """The paper-shaped table (config, metrics, s/video, speedups, acceptance) plus the sweep saving."""
    lines = ["# SDVG evaluation", ""]
    ident = run.get("identity", {})
    lines.append("setup: " + ", ".join(f"{k} {v}" for k, v in ident.items() if k not in ("columns",)))
    lines.append("")
    lines.append("| config | n | " + " | ".join(metrics) + " | s/video | speedup (measured) | speedup (counted) | "
                 "acceptance blocks 1..N-1 |")
    lines.append("|" + "---|" * (len(metrics) + 6))
    for s in summ:
        secs = f"{s.seconds:.2f}" + ("" if s.all_fresh else "*")
        lines.append(f"| {s.config} | {s.rows} | " + " | ".join(_f(s.metrics[m]) for m in metrics)
                     + f" | {secs} | {_x(s.speedup_measured)} | {s.speedup_counted:.2f}x | "
                     + ("-" if s.acceptance is None else f"{s.acceptance:.1%}") + " |")
    lines.append("")
    if any(not s.all_fresh for s in summ):
        lines.append("\\* measured with the unit's shared memo (the prefix a config shares with an earlier config of "
                     "the same prompt was not recomputed), so these seconds are not a fresh run's and no measured "
                     "speedup is given (run with --fresh-timing for fresh-run seconds); the counted speedup is exact "
                     "either way (fresh-run forwards, target:drafter cost ratio from the engine report).")
    if ImageRewardMean.name in metrics:
        lines.append(f"note: {IMAGEREWARD_NOTE}.")
    lines += equal_cost_lines(equal_cost(summ, metrics))
    comp = sum(u.computed_forwards for u in savings)
    naive = sum(u.naive_forwards for u in savings)
    cc, nc = sum(u.computed_cost for u in savings), sum(u.naive_cost for u in savings)
    lines += ["", "## Sweep saving (shared memo per (prompt, seed) unit)", "",
              f"total: {comp} forwards computed vs {naive} for a naive sweep (one fresh run per config); counted cost "
              f"{cc:.1f} vs {nc:.1f} -> saving {1 - cc / nc if nc else 0:.1%}", "",
              "| prompt | seed | configs | forwards computed | naive | saving (counted cost) |", "|---|---|---|---|---|---|"]
    lines += [f"| {u.prompt_id} | {u.seed} | {u.configs} | {u.computed_forwards} | {u.naive_forwards} | {u.saving:.1%} |"
              for u in savings]
    return "\n".join(lines) + "\n"


METRIC_TITLES = {  # the y-axis title of each built-in metric column
    "vr": "VisionReward (vr, the paper's metric; higher is better)",
    "imagereward_mean": "ImageReward, mean over frames (the router's own score; higher is better)",
    "clip": "CLIP frame-text cosine (higher is better)"}
PLOT_BOX = (90, 30, 52, 60)  # left, right, top, bottom margins in pixels (both renderers draw the same box)
TITLE_Y, NOTE_Y = 14, 32  # pixels from the top: the title line (and legend), the zoomed-axis note under it
Y_TITLE_X = 14  # pixels from the left edge: the centre line of the rotated y-axis title
MARKER_R = 5  # marker radius in pixels
FAN_R = 12  # markers closer than 2 * MARKER_R are spread on a circle of this radius around their true spot
CHAR_W, LABEL_H = 6, 12  # pixels per label character and per label line (PIL's default font; matplotlib 8 pt)
CURVE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
BASELINE_COLORS = {ACCEPT_ALL: "#d62728"}
OTHER_COLOR = "#444444"
# A series with a style of its own (colour, marker shape): StrideAR's points are triangles on a dashed line, so they
# read as another method, not as one more tau curve.
SERIES_STYLES = {STRIDE_KIND: ("#8c564b", "triangle")}
CURVE_SHAPE = "circle"
BASELINE_SHAPE = "square"
MPL_MARKERS = {"circle": "o", "square": "s", "triangle": "^"}


def series_style(kind: str, index: int) -> tuple[str, str]:
    """(colour, marker shape) of the curve kind drawn `index`-th."""
    return SERIES_STYLES.get(kind, (CURVE_COLORS[index % len(CURVE_COLORS)], CURVE_SHAPE))


def plot_points(summ: list[ConfigSummary], metric: str) -> dict:
    """What the Pareto plot draws: one curve per tau kind and StrideAR's points as a series of their own (each
    sorted by speedup), baselines as labelled points."""
    kinds = (*CURVE_KINDS, *(f"{k}@route" for k in CURVE_KINDS), STRIDE_KIND)  # the tiny-decoder router: its own
    curves = {k: sorted([[s.speedup_counted, s.metrics[metric], s.config] for s in summ if s.kind == k])
              for k in kinds if any(s.kind == k for s in summ)}
    points = [[s.speedup_counted, s.metrics[metric], s.config] for s in summ if s.kind in BASELINE_KINDS]
    data = {"x": "speedup vs target-only (counted)", "y": metric,
            "y_title": METRIC_TITLES.get(metric, f"{metric} (mean per video)"), "curves": curves, "points": points}
    return {**data, "y_note": zoom_note(data)}


def zoom_note(data: dict) -> str | None:
    """When zero is not on the y axis (it autoscales to the points), how far apart the points really are: their
    spread as a fraction of target-only's value (else of the largest), so a difference of a few thousandths
    (0.0773 vs 0.0788 in the paper) is not read as a large one. None when zero is in view."""
    ys = [p[1] for c in data["curves"].values() for p in c] + [p[1] for p in data["points"]]
    ys = [y for y in ys if math.isfinite(y)]
    if len(ys) < 2:
        return None
    _, _, y0, y1 = _limits(data)
    if y0 <= 0 <= y1:
        return None
    ref = next((p for p in data["points"] if p[2] == SPEEDUP_BASELINE), None)
    ref_value, ref_name = (ref[1], SPEEDUP_BASELINE) if ref else (max(ys, key=abs), "the largest value")
    spread = max(ys) - min(ys)
    return (f"y axis zoomed (zero not shown): all {len(ys)} configs lie within {spread:.4g} of each other, "
            f"{spread / abs(ref_value):.1%} of {ref_name}'s {ref_value:.4g}")


def curve_label(kind: str, points: list) -> str:
    """Legend text of a curve kind: a curve when it has several taus (or ks), else the one point it is."""
    if kind == STRIDE_KIND:
        return "StrideAR (stride k)" if len(points) > 1 else "StrideAR (one k)"
    if kind.endswith("@route"):
        kind = f"{kind.partition('@')[0]}, tiny decoder routes"
    return f"{kind} (tau curve)" if len(points) > 1 else f"{kind} (one tau)"


def _limits(data: dict) -> tuple[float, float, float, float]:
    pts = [p for c in data["curves"].values() for p in c] + data["points"]
    xs, ys = [p[0] for p in pts] or [0, 1], [p[1] for p in pts] or [0, 1]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    padx, pady = (x1 - x0) * 0.12 or 0.5, (y1 - y0) * 0.12 or abs(y0) * 0.1 or 0.5
    return x0 - padx, x1 + padx, y0 - pady, y1 + pady


def layout(data: dict, size: tuple[int, int] = PLOT_SIZE) -> list[dict]:
    """Where every point's marker and label go, in pixels from the top left (both renderers draw this).

    Points that would sit on each other (closer than a marker) are fanned out on a small circle around their true
    spot (a thin line joins each to it), and each label moves until it overlaps no other label and no marker."""
    w, h = size
    left, right, top, bottom = PLOT_BOX
    x0, x1, y0, y1 = _limits(data)

    def px(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x0) / (x1 - x0) * (w - left - right), h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom))

    items = []
    for i, (kind, pts) in enumerate(data["curves"].items()):
        color, shape = series_style(kind, i)
        items += [{"name": n, "kind": kind, "x": x, "y": y, "color": color, "shape": shape} for x, y, n in pts]
    items += [{"name": n, "kind": "baseline", "x": x, "y": y, "color": BASELINE_COLORS.get(n, OTHER_COLOR),
               "shape": BASELINE_SHAPE} for x, y, n in data["points"]]
    for it in items:
        it["X"], it["Y"] = px(it["x"], it["y"])
        it["mx"], it["my"] = it["X"], it["Y"]
    groups: list[list[dict]] = []
    for it in items:  # points within one marker of a group's first point share its spot
        g = next((g for g in groups if (g[0]["X"] - it["X"]) ** 2 + (g[0]["Y"] - it["Y"]) ** 2 < (2 * MARKER_R) ** 2), None)
        (g.append(it) if g is not None else groups.append([it]))
    for g in groups:
        if len(g) > 1:
            for k, it in enumerate(g):
                angle = 2 * math.pi * k / len(g) - math.pi / 2
                it["mx"], it["my"] = g[0]["X"] + FAN_R * math.cos(angle), g[0]["Y"] + FAN_R * math.sin(angle)
    boxes = [(it["mx"] - MARKER_R, it["my"] - MARKER_R, it["mx"] + MARKER_R, it["my"] + MARKER_R) for it in items]
    for it in items:
        tw = CHAR_W * len(it["name"]) + 2
        rows = [it["my"] - LABEL_H / 2 + k * LABEL_H for k in (0, 1, -1, 2, -2, 3, -3, 4, -4)]
        right_side = [(it["mx"] + MARKER_R + 4, y) for y in rows]
        left_side = [(it["mx"] - MARKER_R - 4 - tw, y) for y in rows]
        # a marker fanned out to the left of its spot labels on its left first (away from the others)
        cands = left_side + right_side if it["mx"] < it["X"] - 1 else right_side + left_side
        for lx, ly in cands + [cands[0]]:
            box = (lx, ly, lx + tw, ly + LABEL_H)
            inside = left <= box[0] and box[2] <= w - 2 and top <= box[1] and box[3] <= h - bottom  # may use the right margin
            if inside and not any(_overlap(box, b) for b in boxes):
                break
        it["label"] = [round(v, 1) for v in box]
        boxes.append(box)
    return items


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def render_plot(data: dict, path: Path, use_matplotlib: bool = True) -> Path:
    """Quality vs speedup: matplotlib when installed (and `use_matplotlib`), else PIL. Both draw `layout(data)`;
    the points and the layout go into the PNG's text chunk."""
    data = {**data, "layout": layout(data)}
    if use_matplotlib:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except ImportError:
            use_matplotlib = False
    return _render_matplotlib(data, path) if use_matplotlib else _render_pil(data, path)


def _render_matplotlib(data: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.transforms import IdentityTransform

    w, h = PLOT_SIZE
    left, right, top, bottom = PLOT_BOX
    fig = plt.figure(figsize=(w / 100, h / 100), dpi=100)
    ax = fig.add_axes((left / w, bottom / h, (w - left - right) / w, (h - top - bottom) / h))
    x0, x1, y0, y1 = _limits(data)
    ax.set_xlim(x0, x1), ax.set_ylim(y0, y1), ax.grid(alpha=0.3)
    ax.set_xlabel(data["x"])
    fig.text(Y_TITLE_X / w, 1 - (top + (h - top - bottom) / 2) / h, data["y_title"], rotation=90, ha="center",
             va="center", fontsize=9)
    fig.text(left / w, 1 - TITLE_Y / h, f"{data['y']} vs speedup (Pareto)", fontsize=10, va="center")
    if data.get("y_note"):
        fig.text(left / w, 1 - NOTE_Y / h, data["y_note"], fontsize=8, va="center", color="#b00000")
    pix = IdentityTransform()  # the layout is in pixels from the top left; matplotlib's display pixels start bottom left
    from matplotlib.lines import Line2D

    handles = []
    for i, (kind, pts) in enumerate(data["curves"].items()):
        color, shape = series_style(kind, i)
        style = "--" if kind in SERIES_STYLES else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, zorder=1)
        handles.append(Line2D([], [], color=color, linestyle=style, marker=MPL_MARKERS[shape], markersize=5,
                              label=curve_label(kind, pts)))
    for it in data["layout"]:
        if (it["mx"], it["my"]) != (it["X"], it["Y"]):
            ax.plot([it["X"], it["mx"]], [h - it["Y"], h - it["my"]], "-", color="#999999", lw=0.8, transform=pix,
                    zorder=2)
        ax.plot([it["mx"]], [h - it["my"]], MPL_MARKERS[it["shape"]], color=it["color"],
                markersize=2 * MARKER_R * 72 / 100, transform=pix, zorder=3, clip_on=False)
        lx, ly = it["label"][0], it["label"][1]
        fig.text(lx / w, 1 - (ly + LABEL_H / 2) / h, it["name"], color=it["color"], fontsize=8, va="center")
    if data["curves"]:  # on the title line, right: never over a point or a label
        ax.legend(handles=handles, loc="center right", bbox_to_anchor=(1.0, 1 + (top - TITLE_Y) / (h - top - bottom)),
                  ncol=len(data["curves"]), fontsize=8, frameon=False, borderaxespad=0.0)
    fig.savefig(path, dpi=100, metadata={PNG_KEY: json.dumps(data)})
    plt.close(fig)
    return path


def _render_pil(data: dict, path: Path) -> Path:
    from PIL import Image, ImageDraw
    from PIL.PngImagePlugin import PngInfo

    w, h = PLOT_SIZE
    left, right, top, bottom = PLOT_BOX
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    x0, x1, y0, y1 = _limits(data)

    def px(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x0) / (x1 - x0) * (w - left - right), h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom))

    d.rectangle([left, top, w - right, h - bottom], outline="black")
    for i in range(5):
        fx, fy = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        X, _ = px(fx, y0)
        _, Y = px(x0, fy)
        d.line([X, h - bottom, X, h - bottom + 5], fill="black")
        d.text((X - 12, h - bottom + 8), f"{fx:.2f}x", fill="black")
        d.line([left - 5, Y, left, Y], fill="black")
        tick = f"{fy:.4f}"
        d.text((left - 8 - d.textlength(tick), Y - 6), tick, fill="black")  # right-aligned to the axis
    d.text((w // 2 - 100, h - 22), data["x"], fill="black")
    d.text((left, TITLE_Y - 6), f"{data['y']} vs speedup (Pareto)", fill="black")
    if data.get("y_note"):
        d.text((left, NOTE_Y - 6), data["y_note"], fill="#b00000")
    title = data["y_title"]  # rotated y-axis title, centred on the plot's height
    tw = int(d.textlength(title)) + 4
    strip = Image.new("RGB", (tw, LABEL_H + 2), "white")
    ImageDraw.Draw(strip).text((2, 0), title, fill="black")
    strip = strip.rotate(90, expand=True)
    img.paste(strip, (Y_TITLE_X - strip.width // 2, top + (h - top - bottom - strip.height) // 2))
    lx = w - right  # legend above the plot box, right-aligned: never over a point or a label
    for i, (kind, cpts) in reversed(list(enumerate(data["curves"].items()))):  # legend and curve lines
        col, shape = series_style(kind, i)
        text = curve_label(kind, cpts)
        lx -= d.textlength(text) + 30
        _pil_line(d, [(lx, TITLE_Y), (lx + 20, TITLE_Y)], col, dashed=kind in SERIES_STYLES)
        _pil_marker(d, shape, lx + 10, TITLE_Y, 3, col)
        d.text((lx + 24, TITLE_Y - 6), text, fill=col)
        xy = [px(x, y) for x, y, _ in cpts]
        if len(xy) > 1:
            _pil_line(d, xy, col, dashed=kind in SERIES_STYLES)
    for it in data["layout"]:
        X, Y, mx, my, r = it["X"], it["Y"], it["mx"], it["my"], MARKER_R
        if (mx, my) != (X, Y):
            d.line([X, Y, mx, my], fill="#999999", width=1)
        _pil_marker(d, it["shape"], mx, my, r, it["color"])
        d.text((it["label"][0], it["label"][1]), it["name"], fill=it["color"])
    info = PngInfo()
    info.add_text(PNG_KEY, json.dumps(data))
    img.save(path, pnginfo=info)
    return path


DASH_PX = (8, 5)  # drawn and skipped pixels of a dashed series line (PIL)


def _pil_marker(d, shape: str, x: float, y: float, r: float, color: str) -> None:
    """A filled marker of `shape` centred on (x, y) (a triangle's centre is inside it, as matplotlib's '^')."""
    if shape == "circle":
        d.ellipse([x - r, y - r, x + r, y + r], fill=color)
    elif shape == "triangle":
        d.polygon([(x, y - r * 1.2), (x - r * 1.1, y + r * 0.8), (x + r * 1.1, y + r * 0.8)], fill=color)
    else:
        d.rectangle([x - r, y - r, x + r, y + r], fill=color)


def _pil_line(d, xy: list[tuple[float, float]], color: str, dashed: bool = False) -> None:
    """A polyline, solid or dashed (DASH_PX on/off along each segment)."""
    if not dashed:
        d.line(xy, fill=color, width=2)
        return
    on, off = DASH_PX
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        length = math.hypot(x1 - x0, y1 - y0)
        t = 0.0
        while t < length:
            t1 = min(t + on, length)
            d.line([(x0 + (x1 - x0) * t / length, y0 + (y1 - y0) * t / length),
                    (x0 + (x1 - x0) * t1 / length, y0 + (y1 - y0) * t1 / length)], fill=color, width=2)
            t += on + off


def write_report(out: str | Path) -> tuple[Path, Path]:
    """summary.md, units.csv and pareto.png of a results folder."""
    out = Path(out)
    rows = read_rows(out / "rows.csv")
    if not rows:
        raise ValueError(f"{out / 'rows.csv'} holds no rows")
    header = list(rows[0].keys())
    metrics = metric_columns(header)
    run = json.loads((out / RUN_FILE).read_text()) if (out / RUN_FILE).exists() else {}
    summ = summarise(rows, metrics)
    savings = unit_savings(rows)
    summary = out / SUMMARY_FILE
    summary.write_text(markdown(summ, metrics, savings, run))
    with open(out / UNITS_FILE, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(UNIT_COLUMNS)
        for u in savings:
            w.writerow([u.prompt_id, u.seed, u.configs, u.computed_forwards, u.naive_forwards, repr(u.computed_cost),
                        repr(u.naive_cost), repr(u.saving)])
    # the plot shows the paper's metric when it was measured, else the first metric independent of the router
    independent = [m for m in metrics if m != ImageRewardMean.name]
    shown = "vr" if "vr" in metrics else (independent or metrics)[0]
    plot = render_plot(plot_points(summ, shown), out / PLOT_FILE)
    cal = write_calibration(out, rows, summ)
    if cal is not None:  # the tiny decoder against the full VAE, from the @calibrate rows' paired scores
        summary.write_text(summary.read_text() + "\n" + calibration_lines(cal))
    return summary, plot


CALIBRATION_FILE, CALIBRATION_PLOT = "calibration.json", "calibration.png"


def write_calibration(out: Path, rows: list[dict], summ: list[ConfigSummary]) -> dict | None:
    """calibration.json / calibration.png of the @calibrate rows (None without any): every paired draft score, the
    agreement and matched tau at each tau of the sweep's tau configs and of the @calibrate configs themselves."""
    from sdvg_core.engine.calibration import calibrate
    from sdvg_core.engine.calibration_plot import render_calibration_plot

    docs = [json.loads(r["paired"]) for r in rows if r.get("paired")]
    paired = [p for d in docs for p in d["pairs"]]
    if not paired:
        return None
    reference, candidate = [p[0] for p in paired], [p[1] for p in paired]
    cal_taus = sorted({s.value for s in summ if s.kind.endswith("@calibrate") and s.value is not None})
    taus = sorted({s.value for s in summ if s.value is not None and s.kind.partition("@")[0] in CURVE_KINDS})
    result = calibrate(reference, candidate, taus)
    doc = {"reference_decoder": "wan_vae", "candidate_decoder": docs[0]["decoder"], "calibrate_taus": cal_taus,
           "calibration": {**result.as_dict(), "reference": reference, "candidate": candidate}}
    (out / CALIBRATION_FILE).write_text(json.dumps(doc, indent=1))
    render_calibration_plot(reference, candidate, cal_taus[0] if cal_taus else None,
                            labels=("full Wan VAE", doc["candidate_decoder"])).save(out / CALIBRATION_PLOT)
    return doc


def calibration_lines(doc: dict) -> str:
    """The summary's calibration section: per tau, acceptance on both scales, agreement, the matched tau."""
    c = doc["calibration"]
    corr = lambda v: "-" if v is None else f"{v:+.3f}"  # noqa: E731
    lines = [f"## Routing decoder calibration ({doc['candidate_decoder']} against the full VAE)", "",
             f"{c['blocks']} drafts of the @calibrate rows scored through both decoders; Pearson {corr(c['pearson'])}, "
             f"Spearman {corr(c['spearman'])} ({CALIBRATION_FILE}, {CALIBRATION_PLOT}).", "",
             "| tau | acceptance (full VAE) | acceptance (tiny, same tau) | agreement | matched tau (tiny) | "
             "agreement at matched tau |", "|---|---|---|---|---|---|"]
    for t in c["taus"]:
        lines.append(f"| {t['tau']:g} | {t['reference_acceptance']:.1%} | {t['candidate_acceptance']:.1%} | "
                     f"{t['agreement']:.1%} | {t['matched_tau']:.4f} | {t['matched_agreement']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m sdvg_eval.report RESULTS_FOLDER", file=sys.stderr)
        return 2
    try:
        summary, plot = write_report(args[0])
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary.read_text())
    print(f"wrote {summary} and {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
