"""The results folder: rows.csv (one row per (config, prompt, seed), appended as each finishes), units.csv (sweep
saving per (prompt, seed) unit) and run.json (the fingerprint that keeps rows of different setups apart)."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
from pathlib import Path

from .config import RESULTS_FILE, RUN_FILE, UNITS_FILE

# the paper's per-prompt record is `config, prompt, vr, time_s, s1..s8, b1..b8` with `prompt` the prompt's index in
# the prompt file (MovieGenVideoBench: id k = line k+1): those columns first, in that order, with the same names for
# the same quantities; then the seed, the other metrics and the extra columns
HEAD = ["config", "prompt"]
PAPER_METRIC = "vr"  # VisionReward-Video, the paper's quality column
TIME = "time_s"
SEED = "seed"
TAIL = ["fresh_time", "counted_cost", "target_only_cost", "counted_speedup", "drafter_forwards",
        "target_forwards", "computed_drafter_forwards", "computed_target_forwards", "computed_cost", "acceptance"]
# recipe: the context recipes that ran (`krea`, or `drafter longlive / target krea`); prompt_text: the prompt, or a
# prompt schedule as `0: text | 12: text`
END = ["frames_digest", "video", "worker", "run", "recipe", "prompt_text"]
# with a tiny routing decoder in the sweep (@route / @calibrate configs): each row's routing decoder, and a @calibrate
# row's paired scores of its drafts, JSON {"decoder": the tiny decoder's name, "pairs": [[full VAE, tiny decoder], ...]}
# (each draft's min over frames)
ROUTE_COLUMNS = ["route_decoder", "paired"]
UNIT_COLUMNS = ["prompt", "seed", "configs", "computed_forwards", "naive_forwards", "computed_cost", "naive_cost",
                "saving"]
CODE_PACKAGES = ("sdvg_core", "sdvg_eval")  # their sources define what a row means
CODE_VERSION_ENV = "SDVG_EVAL_CODE_VERSION"  # pins the code version (tests in a tree others edit; deliberate reuse)


class RunMismatch(RuntimeError):
    """The results folder holds rows of another setup (models, code, geometry, metrics)."""


def columns(metric_names: list[str], block_cols: list[str], route: bool = False) -> list[str]:
    """The CSV header: the paper's columns in its order (config, prompt, vr when measured, time_s, s1.., b1..),
    then the seed, the other metrics, counted cost, digest and video; `route`: ROUTE_COLUMNS at the end."""
    paper = [PAPER_METRIC] if PAPER_METRIC in metric_names else []
    others = [m for m in metric_names if m != PAPER_METRIC]
    return HEAD + paper + [TIME] + block_cols + [SEED] + others + TAIL + END + (ROUTE_COLUMNS if route else [])


def metric_columns(header: list[str]) -> list[str]:
    """The metric columns of a rows.csv header (vr first when present, then those between the seed and the
    cost columns)."""
    paper = [PAPER_METRIC] if PAPER_METRIC in header else []
    return paper + header[header.index(SEED) + 1: header.index(TAIL[0])]


def code_version(root: Path | None = None) -> dict[str, str]:
    """A content hash of the packages' sources (and the git commit, informational): rows of other code are refused.

    The environment variable SDVG_EVAL_CODE_VERSION replaces the hash (it is then recorded as given)."""
    if os.environ.get(CODE_VERSION_ENV):
        return {"code": f"pinned:{os.environ[CODE_VERSION_ENV]}"}
    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=12)
    for pkg in CODE_PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    out = {"code": h.hexdigest()}
    try:
        out["git"] = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def fingerprint(ident: dict) -> str:
    """Short hash of the identity fields that make rows comparable (the `git` field is informational only)."""
    core = {k: v for k, v in ident.items() if k != "git"}
    return hashlib.blake2b(json.dumps(core, sort_keys=True).encode(), digest_size=6).hexdigest()


def check_results(out: Path, ident: dict, header: list[str]) -> str:
    """The fingerprint of rows made with `ident`; RunMismatch when `out` already holds rows of another setup. Reads
    only: nothing is written (sdvg_eval checks this before it joins a cluster or writes anything)."""
    ident = {**ident, "columns": header}
    fp = fingerprint(ident)
    run_file = out / RUN_FILE
    if run_file.exists():
        old = json.loads(run_file.read_text())
        if old.get("fingerprint") != fp:
            diff = sorted(k for k in set(old["identity"]) | set(ident) if k != "git"
                          and old["identity"].get(k) != ident.get(k))
            raise RunMismatch(f"{out} holds rows of another setup (differs in: {', '.join(diff)}); rows are never "
                              f"mixed: give a new --out, or delete {out} to start over")
    return fp


def open_results(out: Path, ident: dict, header: list[str]) -> str:
    """Create or re-open a results folder; refuse one holding rows of another setup. Returns the fingerprint."""
    fp = check_results(out, ident, header)
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / RUN_FILE
    if not run_file.exists():
        tmp = run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fingerprint": fp, "identity": {**ident, "columns": header}}, indent=2))
        tmp.replace(run_file)
    return fp


def read_rows(path: Path) -> list[dict]:
    """Complete rows of a CSV (a line cut short by a kill, without its newline, is dropped)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(text.splitlines(keepends=True)))
    return [r for r in rows if None not in r and all(v is not None for v in r.values())]


class Appender:
    """Appends one row at a time, flushed and fsynced, so a kill loses at most the rows not yet returned."""

    def __init__(self, path: Path, header: list[str]):
        self.path, self.header = path, header
        existing = path.exists() and path.stat().st_size > 0
        if existing:
            text = path.read_text(encoding="utf-8")
            if not text.endswith("\n"):  # a write cut short by a kill: drop the partial line
                path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
        self.f = open(path, "a", newline="", encoding="utf-8")
        self.w = csv.DictWriter(self.f, fieldnames=header, extrasaction="raise")
        if not existing:
            self.w.writeheader()
            self._sync()

    def _sync(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())

    def write(self, row: dict) -> None:
        self.w.writerow({k: _cell(row.get(k, "")) for k in self.header})
        self._sync()

    def close(self) -> None:
        self.f.close()


def _cell(v) -> object:
    """Floats as repr (shortest exact round trip): a CSV value reads back bit for bit."""
    return repr(v) if isinstance(v, float) else v


def results_paths(out: Path) -> tuple[Path, Path]:
    return out / RESULTS_FILE, out / UNITS_FILE
