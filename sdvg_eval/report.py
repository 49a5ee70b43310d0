"""The summary of a results folder: the paper-shaped markdown table, the sweep saving, and a Pareto plot PNG.

    python -m sdvg_eval.report OUT        # reads OUT/rows.csv, writes OUT/summary.md, OUT/units.csv, OUT/pareto.png

Every number comes from rows.csv; the PNG carries the plotted points as a text chunk (`sdvg-points`, JSON) so
a reader (and the tests) can check the picture against the table.
"""
from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import BASELINE_KINDS, CURVE_KINDS, PLOT_FILE, RUN_FILE, SPEEDUP_BASELINE, SUMMARY_FILE, UNITS_FILE, parse_config
from .metrics import IMAGEREWARD_NOTE, ImageRewardMean
from .records import HEAD, TAIL, UNIT_COLUMNS, read_rows

PNG_KEY = "sdvg-points"  # PNG text chunk holding the plotted points
PLOT_SIZE = (900, 600)  # pixels (PIL path); matplotlib uses the same at 100 dpi
ACCEPT_ALL = "accept-all"  # the "block 0 from the target, accept the rest" baseline every policy is compared with


@dataclass(frozen=True)
class ConfigSummary:
    """One table line: means over the config's rows."""

    config: str
    kind: str
    value: float | None
    rows: int
    metrics: dict[str, float]
    seconds: float
    all_fresh: bool  # every row's time was a fresh run's (nothing reused from the shared memo)
    speedup_measured: float | None
    speedup_counted: float
    acceptance: float | None


def metric_columns(header: list[str]) -> list[str]:
    """The metric columns of a rows.csv header (between the ids and the time/cost columns)."""
    return header[len(HEAD): header.index(TAIL[0])]


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
            name, c.kind, c.value, len(rs), {m: _mean([float(r[m]) for r in rs]) for m in metrics}, secs,
            fresh, base_s / secs if fresh and base_fresh and secs else None, counted,
            sum(decisions) / len(decisions) if decisions else None))
    order = {k: i for i, k in enumerate(("target-only", "draft-only", "accept-all", "random", "sdvg", "sdvg-mean"))}
    return sorted(out, key=lambda s: (order[s.kind], -(s.value or 0)))


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


def plot_points(summ: list[ConfigSummary], metric: str) -> dict:
    """What the Pareto plot draws: one curve per tau kind (sorted by speedup), baselines as labelled points."""
    curves = {k: sorted([[s.speedup_counted, s.metrics[metric], s.config] for s in summ if s.kind == k])
              for k in CURVE_KINDS if any(s.kind == k for s in summ)}
    points = [[s.speedup_counted, s.metrics[metric], s.config] for s in summ if s.kind in BASELINE_KINDS]
    return {"x": "speedup vs target-only (counted)", "y": metric, "curves": curves, "points": points}


def render_plot(data: dict, path: Path) -> Path:
    """Quality vs speedup: matplotlib when installed, else PIL; the points go into the PNG's text chunk."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _render_pil(data, path)
    fig, ax = plt.subplots(figsize=(PLOT_SIZE[0] / 100, PLOT_SIZE[1] / 100), dpi=100)
    for kind, pts in data["curves"].items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=kind)
        for x, y, name in pts:
            ax.annotate(name.partition(":")[2], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    for x, y, name in data["points"]:
        ax.plot([x], [y], "s" if name == ACCEPT_ALL else "D")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel(data["x"]), ax.set_ylabel(data["y"]), ax.grid(alpha=0.3), ax.legend()
    fig.savefig(path, metadata={PNG_KEY: json.dumps(data)})
    plt.close(fig)
    return path


def _render_pil(data: dict, path: Path) -> Path:
    from PIL import Image, ImageDraw
    from PIL.PngImagePlugin import PngInfo

    w, h = PLOT_SIZE
    left, right, top, bottom = 80, 30, 40, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    pts = [p for c in data["curves"].values() for p in c] + data["points"]
    xs, ys = [p[0] for p in pts] or [0, 1], [p[1] for p in pts] or [0, 1]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    padx, pady = (x1 - x0) * 0.1 or 0.5, (y1 - y0) * 0.1 or abs(y0) * 0.1 or 0.5
    x0, x1, y0, y1 = x0 - padx, x1 + padx, y0 - pady, y1 + pady

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
        d.text((5, Y - 6), f"{fy:.4f}", fill="black")
    d.text((w // 2 - 100, h - 22), data["x"], fill="black")
    d.text((left, 12), f"{data['y']} vs speedup (Pareto)", fill="black")
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    placed: list[tuple[float, float]] = []

    def label(X: float, Y: float, text: str, col: str) -> None:
        """Write a label next to its marker, moved down while it would overlap one already written."""
        while any(abs(X - a) < 90 and abs(Y - b) < 12 for a, b in placed):
            Y += 12
        placed.append((X, Y))
        d.text((X, Y), text, fill=col)

    for i, kind in enumerate(data["curves"]):  # legend
        d.line([w - right - 150, top + 12 + 16 * i, w - right - 130, top + 12 + 16 * i], fill=colors[i % 4], width=2)
        d.text((w - right - 125, top + 6 + 16 * i), f"{kind} (tau curve)", fill=colors[i % 4])
    for i, (kind, cpts) in enumerate(data["curves"].items()):
        col = colors[i % len(colors)]
        xy = [px(x, y) for x, y, _ in cpts]
        if len(xy) > 1:
            d.line(xy, fill=col, width=2)
        for (X, Y), (_, _, name) in zip(xy, cpts):
            d.ellipse([X - 4, Y - 4, X + 4, Y + 4], fill=col)
            label(X + 6, Y - 12, name, col)
    for x, y, name in data["points"]:
        X, Y = px(x, y)
        col = "#d62728" if name == ACCEPT_ALL else "#444444"
        d.rectangle([X - 4, Y - 4, X + 4, Y + 4], fill=col)
        label(X + 6, Y + 2, name, col)
    info = PngInfo()
    info.add_text(PNG_KEY, json.dumps(data))
    img.save(path, pnginfo=info)
    return path


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
    independent = [m for m in metrics if m != ImageRewardMean.name]
    plot = render_plot(plot_points(summ, (independent or metrics)[0]), out / PLOT_FILE)
    return summary, plot


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
