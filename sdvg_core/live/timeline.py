"""The record of a live run: what each block was made under, read once at the boundary before it (the tau, the policy
in force, the prompt, the strength, the recorded input frames it read). A replay is a run of this schedule."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TIMELINE_VERSION = 1  # the layout of `Timeline.to_dict` (a replay refuses another)


@dataclass(frozen=True)
class BlockSettings:
    """What block `block` was made under."""

    block: int
    policy: str  # the policy in force, in the one grammar (`sdvg:tau=-0.7`; `target-only` while the drafter is off)
    tau: float | None  # the threshold of that policy (None: no score decided the block)
    prompt: int  # index into Timeline.prompts
    strength: float | None = None  # a video-to-video block's strength (None: no input video)
    input: tuple[int, int] | None = None  # (first, count) of the recorded input frames the block read
    settings_version: int = 0  # which change of the controls the block took (LiveSettings.version)


@dataclass
class Timeline:
    """Every block's settings, the prompts by index (in the order first used), and the recorded input, if any."""

    prompts: list[str] = field(default_factory=list)
    blocks: list[BlockSettings] = field(default_factory=list)
    input_file: str | None = None  # the recorded input frames beside the report (raw RGB, uint8, H x W x 3 each)
    input_hw: tuple[int, int] | None = None
    input_digest: str | None = None  # what names the input in the run's lineage (a replay names it the same)
    received_frames: int = 0  # frames the live source received
    dropped_frames: int = 0  # of them, those no block used (the run was slower than the source)
    stopped_by_user: bool = False
    base_policy: str = "sdvg"  # the policy kind while the drafter is on (its tau is each block's)
    run: dict = field(default_factory=dict)  # what a replay needs besides the blocks (seed, size, recipes, models...)

    def prompt_index(self, text: str) -> int:
        """The index of `text` among the prompts (added when new)."""
        if text not in self.prompts:
            self.prompts.append(text)
        return self.prompts.index(text)

    def to_dict(self) -> dict:
        return {"version": TIMELINE_VERSION, "prompts": list(self.prompts),
                "blocks": [asdict(b) for b in self.blocks], "input_file": self.input_file,
                "input_hw": None if self.input_hw is None else list(self.input_hw), "input_digest": self.input_digest,
                "received_frames": self.received_frames, "dropped_frames": self.dropped_frames,
                "stopped_by_user": self.stopped_by_user, "base_policy": self.base_policy, "run": dict(self.run)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Timeline":
        """A timeline read back from a report's `live` entry (ValueError naming what is wrong)."""
        if not isinstance(data, dict) or data.get("version") != TIMELINE_VERSION:
            raise ValueError(f"not a live timeline of version {TIMELINE_VERSION} (the report's 'live' entry): "
                             f"got {data.get('version') if isinstance(data, dict) else type(data).__name__!r}")
        try:
            blocks = [BlockSettings(int(b["block"]), str(b["policy"]), None if b["tau"] is None else float(b["tau"]),
                                    int(b["prompt"]), None if b.get("strength") is None else float(b["strength"]),
                                    None if b.get("input") is None else (int(b["input"][0]), int(b["input"][1])),
                                    int(b.get("settings_version", 0)))
                      for b in data["blocks"]]
            prompts = [str(p) for p in data["prompts"]]
        except (KeyError, TypeError, IndexError, ValueError) as e:
            raise ValueError(f"the live timeline is damaged: {e!r}") from None
        if [b.block for b in blocks] != list(range(len(blocks))):
            raise ValueError("the live timeline's blocks are not 0, 1, 2, ... in order")
        if any(not 0 <= b.prompt < len(prompts) for b in blocks):
            raise ValueError("a block of the live timeline names a prompt the timeline does not have")
        hw = data.get("input_hw")
        return Timeline(prompts, blocks, data.get("input_file"), None if hw is None else (int(hw[0]), int(hw[1])),
                        data.get("input_digest"), int(data.get("received_frames", 0)),
                        int(data.get("dropped_frames", 0)), bool(data.get("stopped_by_user", False)),
                        str(data.get("base_policy", "sdvg")), dict(data.get("run") or {}))
