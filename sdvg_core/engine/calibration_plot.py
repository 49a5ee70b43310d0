"""Calibration plot: each draft's score under the full VAE (x) against its score under the tiny decoder (y), with
the y = x line, the reference tau (vertical) and the matched tau (horizontal). Points in the two quadrants where the
decoders disagree are coloured apart.

Pure PIL (no matplotlib), like the report plot (engine/plot.py); both axes share one range so y = x is the diagonal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from PIL import Image, ImageDraw, ImageFont

from .calibration import matched_tau as compute_matched_tau
from .plot import _range, _ticks

COLORS = {
    "agree": (72, 167, 92),  # both decoders accept, or both reject
    "disagree": (222, 128, 52),
    "identity": (150, 150, 150),  # y = x
    "tau": (200, 40, 40),  # reference tau (vertical)
    "matched": (70, 90, 200),  # matched tau on the candidate's scale (horizontal)
    "axis": (60, 60, 60),
    "grid": (225, 225, 225),
    "text": (20, 20, 20),
    "background": (255, 255, 255),
}
POINT_RADIUS = 3  # pixels
DASH, GAP = 7, 5  # pixels of a dashed line


@dataclass(frozen=True)
class CalibrationStyle:
    size: int = 420  # the square plot area's side, pixels
    margin_left: int = 64
    margin_right: int = 24
    margin_top: int = 40
    margin_bottom: int = 56

    @property
    def width(self) -> int:
        return self.margin_left + self.size + self.margin_right

    @property
    def height(self) -> int:
        return self.margin_top + self.size + self.margin_bottom


@dataclass(frozen=True)
class Axes:
    """Where a score lands: one value range for both axes, mapped onto the square plot area."""

    lo: float
    hi: float
    style: CalibrationStyle

    def x_of(self, v: float) -> float:
        return self.style.margin_left + (v - self.lo) / (self.hi - self.lo) * self.style.size

    def y_of(self, v: float) -> float:
        return self.style.margin_top + self.style.size - (v - self.lo) / (self.hi - self.lo) * self.style.size


def axes_for(reference: Sequence[float], candidate: Sequence[float], tau: float | None, matched: float | None,
             style: CalibrationStyle = CalibrationStyle()) -> Axes:
    """The shared range: every score and the finite thresholds, padded (as the report plot pads)."""
    values = [*map(float, reference), *map(float, candidate)]
    values += [t for t in (tau, matched) if t is not None and math.isfinite(t)]
    lo, hi = _range(values)
    return Axes(lo, hi, style)


def _dashed(d: ImageDraw.ImageDraw, start: tuple[float, float], end: tuple[float, float], fill, width: int = 1) -> None:
    (x0, y0), (x1, y1) = start, end
    length = math.hypot(x1 - x0, y1 - y0)
    pos = 0.0
    while pos < length:
        a, b = pos / length, min(pos + DASH, length) / length
        d.line([(x0 + a * (x1 - x0), y0 + a * (y1 - y0)), (x0 + b * (x1 - x0), y0 + b * (y1 - y0))], fill=fill,
               width=width)
        pos += DASH + GAP


def render_calibration_plot(reference: Sequence[float], candidate: Sequence[float], tau: float | None = None,
                            matched: float | None = None, labels: tuple[str, str] = ("full Wan VAE", "TAEHV"),
                            style: CalibrationStyle = CalibrationStyle()) -> Image.Image:
    """Scatter of paired block scores (x: reference decoder, y: candidate). With `tau`, the vertical tau line and the
    horizontal matched-tau line (`matched`, computed by quantile matching when not given); points whose accept /
    reject decisions differ between (x >= tau) and (y >= matched) are drawn in the "disagree" colour."""
    if len(reference) != len(candidate) or not len(reference):
        raise ValueError(f"need paired scores: got {len(reference)} reference and {len(candidate)} candidate")
    if tau is not None and matched is None:
        matched = compute_matched_tau(reference, candidate, tau)
    ax = axes_for(reference, candidate, tau, matched, style)
    img = Image.new("RGB", (style.width, style.height), COLORS["background"])
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    left, top = style.margin_left, style.margin_top
    right, bottom = left + style.size, top + style.size

    for t in _ticks(ax.lo, ax.hi, 6):
        x, y = ax.x_of(t), ax.y_of(t)
        d.line([(left, y), (right, y)], fill=COLORS["grid"])
        d.line([(x, top), (x, bottom)], fill=COLORS["grid"])
        label = f"{t:+.2f}"
        d.text((left - 6 - d.textlength(label, font=font), y - 6), label, fill=COLORS["axis"], font=font)
        d.text((x - d.textlength(label, font=font) / 2, bottom + 4), label, fill=COLORS["axis"], font=font)
    d.rectangle([left, top, right, bottom], outline=COLORS["axis"])
    _dashed(d, (ax.x_of(ax.lo), ax.y_of(ax.lo)), (ax.x_of(ax.hi), ax.y_of(ax.hi)), COLORS["identity"])  # y = x

    if tau is not None and math.isfinite(tau):
        _dashed(d, (ax.x_of(tau), top), (ax.x_of(tau), bottom), COLORS["tau"], width=2)
        d.text((ax.x_of(tau) + 4, top + 2), f"tau {tau:+.2f}", fill=COLORS["tau"], font=font)
    if matched is not None and math.isfinite(matched):
        _dashed(d, (left, ax.y_of(matched)), (right, ax.y_of(matched)), COLORS["matched"], width=2)
        d.text((left + 4, ax.y_of(matched) - 14), f"matched tau {matched:+.2f}", fill=COLORS["matched"], font=font)

    disagree = 0
    for r, c in zip(map(float, reference), map(float, candidate)):
        differs = tau is not None and matched is not None and (r >= tau) != (c >= matched)
        disagree += differs
        x, y = ax.x_of(r), ax.y_of(c)
        d.ellipse([x - POINT_RADIUS, y - POINT_RADIUS, x + POINT_RADIUS, y + POINT_RADIUS],
                  fill=COLORS["disagree" if differs else "agree"])

    n = len(reference)
    title = f"block scores: {labels[1]} vs {labels[0]} ({n} blocks"
    title += f", {disagree} decided differently at the matched tau)" if tau is not None else ")"
    d.text((left, 6), title, fill=COLORS["text"], font=font)
    d.text((left, 20), "dashed grey: y = x", fill=COLORS["identity"], font=font)
    x_title = f"{labels[0]} score"
    d.text(((left + right) / 2 - d.textlength(x_title, font=font) / 2, bottom + 20), x_title, fill=COLORS["axis"],
           font=font)
    _y_title(img, f"{labels[1]} score", style, font)
    return img


def _y_title(img: Image.Image, text: str, style: CalibrationStyle, font) -> None:
    """The y-axis title, rotated, at the left edge beside the plot area."""
    probe = ImageDraw.Draw(img)
    strip = Image.new("RGB", (int(probe.textlength(text, font=font)) + 4, 14), COLORS["background"])
    ImageDraw.Draw(strip).text((2, 0), text, fill=COLORS["axis"], font=font)
    strip = strip.rotate(90, expand=True)
    middle = style.margin_top + style.size // 2
    img.paste(strip, (2, max(0, middle - strip.height // 2)))
