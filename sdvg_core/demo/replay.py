"""`--replay report.json`: the demo runs a live run's recorded timeline again (docs/live.md): the same seed, size,
recipes and blocks, each block under the settings it was made with, the recorded input frames read back; with the
same models that gives the same video bit for bit (the report's `meta.lineage`, a hash chain over every block's
latent bytes, is equal)."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from ..live.frames import LiveSource, open_recording
from ..live.session import LiveRun, PromptBook, replay_settings
from ..live.timeline import Timeline

# The recorded run's settings a replay takes instead of the flags (the flag each one sets).
RUN_FLAGS = {"width": "width", "height": "height", "seed": "seed", "max_blocks": "blocks", "recipe": "recipe",
             "drafter_recipe": "drafter_recipe"}


@dataclass(frozen=True)
class Replay:
    """A report's live timeline and where its recorded input is."""

    timeline: Timeline
    folder: Path

    @property
    def takes_input(self) -> bool:
        return self.timeline.input_file is not None

    def source(self) -> LiveSource | None:
        tl = self.timeline
        return None if tl.input_file is None else open_recording(self.folder / tl.input_file, tl.input_hw,
                                                                 tl.input_digest)

    def live_run(self, engine, encode) -> LiveRun:
        """The LiveRun that replays this timeline on `engine` (prompts encoded with `encode(text)`)."""
        return LiveRun(engine, replay_settings(self.timeline), PromptBook(encode),
                       base_policy=self.timeline.base_policy, source=self.source(),
                       timeline=Timeline(run=dict(self.timeline.run)))


def add_replay_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replay", metavar="REPORT",
                   help="run a live run's report.json again (SDVG Live's; its timeline: each block's tau, policy, prompt "
                        "and input): the recorded seed, size, recipes and blocks replace those flags; give the same "
                        "model flags as the run had (the tiny default for a tiny run)")


def read_replay(path: str) -> Replay:
    """The replay of a report (ValueError naming what is wrong)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"--replay {p}: file not found")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"--replay {p}: not a report.json ({e})") from None
    if not isinstance(data, dict) or data.get("live") is None:
        raise ValueError(f"--replay {p}: not a live run's report (it has no 'live' timeline): only SDVG Live runs "
                         f"can be replayed")
    try:
        timeline = Timeline.from_dict(data["live"])
    except ValueError as e:
        raise ValueError(f"--replay {p}: {e}") from None
    missing = [k for k in RUN_FLAGS if k not in timeline.run]
    if missing or not timeline.blocks:
        raise ValueError(f"--replay {p}: the timeline misses {missing or 'its blocks'}")
    replay = Replay(timeline, p.parent)
    if replay.takes_input:
        try:
            replay.source()
        except ValueError as e:
            raise ValueError(f"--replay {p}: {e}") from None
    return replay


def apply_replay(a: argparse.Namespace, replay: Replay) -> list[str]:
    """Set the flags the recorded run fixes; returns the flags given on the command line that it overrides."""
    overridden = []
    for key, flag in RUN_FLAGS.items():
        value = replay.timeline.run[key]
        if key in ("recipe",) and value is None:
            continue
        if getattr(a, flag, None) not in (None, value) and key != "recipe":
            overridden.append(f"--{flag.replace('_', '-')}")
        setattr(a, flag, None if key == "drafter_recipe" and value == "auto" else value)
    return overridden
