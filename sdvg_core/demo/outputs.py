"""Where a demo run writes: a new dated folder under out/demo/ by default, so a second command never replaces the
first one's video and report; an explicit --out that holds an earlier run's outputs is refused unless --overwrite."""
from __future__ import annotations

import time
from pathlib import Path

DEFAULT_ROOT = Path("out/demo")  # relative to the working directory, as --out is
VIDEO_STEM = "sdvg"  # sdvg.mp4 / sdvg.webp
REPORT_JSON = "report.json"
REPORT_PNG = "report.png"
VIDEO_FORMATS = ("mp4", "webp")
OUTPUT_NAMES = (*(f"{VIDEO_STEM}.{ext}" for ext in VIDEO_FORMATS), REPORT_JSON, REPORT_PNG)
STAMP = "%Y%m%d-%H%M%S"  # the dated folder's name: sorts by time, no characters a shell or Windows minds


def earlier_outputs(folder: Path) -> list[str]:
    """The output files of an earlier run that `folder` holds (empty: nothing would be replaced)."""
    return [n for n in OUTPUT_NAMES if (folder / n).exists()] if folder.is_dir() else []


def dated_folder(root: Path = DEFAULT_ROOT, now: float | None = None) -> Path:
    """root/<date-time>, with -2, -3, ... when two runs start within the same second (not created here)."""
    base = root / time.strftime(STAMP, time.localtime(now))
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
