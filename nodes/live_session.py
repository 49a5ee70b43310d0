"""A live run on ComfyUI's terms (what SDVG Live, nodes/live.py, runs on): each committed block streamed to the page,
input frames played as a camera, the run's prompts and its folder under the output folder, and an earlier run's
report read back for a replay."""
from __future__ import annotations

import json
import os
import threading
import time

import torch

import folder_paths

from ..sdvg_core.engine.prompts import PromptConditioning
from ..sdvg_core.given.fit import fit_frames
from ..sdvg_core.io.text import fit_text_len
from ..sdvg_core.live.frames import FRAMES_PER_BLOCK_PIXELS, FrameBuffer
from ..sdvg_core.live.session import PromptBook
from ..sdvg_core.live.timeline import Timeline
from . import live_server
from .session import clip_encode, conditioning_embeddings
from .surface import SDVGError, sentence
from .video_file import WAN_FPS

WHAT = "SDVG Live"
BLOCK_SECONDS = FRAMES_PER_BLOCK_PIXELS / WAN_FPS  # 12 frames a block at 16 fps: the real time a block's video lasts


class LiveStream:
    """What the page gets of each committed block: its frames (JPEG, encoded once), who made it and its score
    against the tau in force, the settings it took, the run's pace against real time."""

    def __init__(self, handle: live_server.LiveHandle, engine, max_blocks: int):
        self.handle, self.engine, self.max_blocks = handle, engine, max_blocks
        self.t0 = time.time()

    def block(self, engine, state, timeline: Timeline) -> None:
        rec, settings = state.blocks[-1], timeline.blocks[len(state.blocks) - 1]
        frames = engine.block_frames(state, rec.index)[engine.given.hidden_frames(state, rec.index):]
        elapsed = time.time() - self.t0
        event = {"run_id": self.handle.run_id, "node": self.handle.node_id, "block": rec.index,
                 "max_blocks": self.max_blocks, "producer": rec.producer, "decision": rec.decision, "score": rec.score,
                 "tau": settings.tau, "policy": settings.policy, "prompt": timeline.prompts[settings.prompt],
                 "strength": settings.strength, "settings_version": settings.settings_version,
                 "seconds": round(sum(dict(rec.seconds).values()), 4), "t_commit": time.time(),
                 "blocks_per_second": round(len(state.blocks) / elapsed, 4) if elapsed > 0 else None,
                 "realtime_blocks_per_second": round(1 / BLOCK_SECONDS, 4),
                 "received_frames": timeline.received_frames, "dropped_frames": timeline.dropped_frames
                 + self.handle.flood_dropped, "fps": WAN_FPS}
        self.handle.recent = (self.handle.recent + [event])[-live_server.KEPT_BLOCK_EVENTS:]
        live_server.send(live_server.EVENT_BLOCK, {**event, "frames": live_server.jpeg_frames(frames)})


class VideoFeeder:
    """IMAGE frames played into a live buffer at the run's frame rate, as a camera would send them."""

    def __init__(self, buffer: FrameBuffer, frames: torch.Tensor, run_hw: tuple[int, int]):
        self.buffer, self.frames, self.run_hw = buffer, frames, run_hw
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="sdvg-live-video", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _play(self) -> None:
        for i in range(self.frames.shape[0]):
            if self._stop.wait(1 / WAN_FPS):
                return
            frame = fit_frames(self.frames[i:i + 1], self.run_hw)[0]  # [3, H, W] in 0..1
            self.buffer.push((frame.permute(1, 2, 0) * 255).round().clamp(0, 255).to(torch.uint8))
        self.buffer.close()


def prepared_prompts(prompts, positive, prompt: str, clip, text_len: int) -> tuple[PromptBook, PromptConditioning]:
    """The run's prompt book (the prepared prompts; a CLIP encodes new ones) and block 0's prompt."""
    if prompts is not None and positive is not None:
        raise SDVGError(f"{WHAT}: both 'prompts' and 'positive' are connected: connect one of them")
    if prompts is not None:
        prepared = [PromptConditioning.make(p.text, fit_text_len(p.embeddings, text_len)) for _, p in prompts]
    elif positive is not None:
        emb, carried = conditioning_embeddings(positive)
        text = prompt.strip() or carried
        if not text:
            raise SDVGError(f"{WHAT}: ImageReward needs the prompt text: fill 'prompt' with the text you encoded")
        prepared = [PromptConditioning.make(text, fit_text_len(emb, text_len))]
    else:
        raise SDVGError(f"{WHAT}: connect 'prompts' (SDVG Prompt Schedule: the prompts the page switches among) or "
                        f"'positive' (one prompt)")
    encode = None if clip is None else (lambda text: fit_text_len(clip_encode(clip, text), text_len))
    return PromptBook(encode, prepared), prepared[0]


def run_folder(prefix: str, width: int, height: int) -> tuple[str, str]:
    """A new folder for one live run under ComfyUI's output folder: (absolute path, path under the output folder)."""
    out_dir = folder_paths.get_output_directory()
    folder, name, counter, subfolder, _ = folder_paths.get_save_image_path(prefix, out_dir, width, height)
    leaf = f"{name}_{counter:05}_"
    path = os.path.join(folder, leaf)
    os.makedirs(path, exist_ok=False)
    return path, "/".join(p for p in (subfolder.replace(os.sep, "/"), leaf) if p)


def read_replay(value: str) -> tuple[Timeline, str]:
    """(the timeline, the folder of the report) of a live run's report named under ComfyUI's output folder."""
    out_dir = os.path.abspath(folder_paths.get_output_directory())
    full = os.path.abspath(os.path.join(out_dir, str(value).strip()))
    if os.path.commonpath((out_dir, full)) != out_dir:
        raise SDVGError(f"{WHAT}: replay {value!r} is not inside ComfyUI's output folder")
    if not os.path.isfile(full):
        raise SDVGError(f"{WHAT}: replay {value!r} is not a file under the output folder ({out_dir}): give the "
                        f"report.json an SDVG Live run wrote (its 'report' output names it)")
    try:
        with open(full, encoding="utf-8") as f:
            data = json.load(f)
        timeline = Timeline.from_dict(data.get("live"))
    except (OSError, ValueError, AttributeError) as e:
        raise SDVGError(f"{WHAT}: replay {value!r} is not a live run's report: {sentence(e)}") from e
    missing = [k for k in ("width", "height", "seed", "max_blocks", "recipe", "drafter_recipe", "input")
               if k not in timeline.run]
    if missing or not timeline.blocks:
        raise SDVGError(f"{WHAT}: replay {value!r} does not hold a live run to replay (missing {missing or 'blocks'})")
    return timeline, os.path.dirname(full)


def check_same_models(timeline: Timeline, session) -> None:
    """A replay runs the recorded run's models: each role's identity must be the one the report names."""
    recorded = timeline.run.get("models", {})
    now = {"target": session.target.key, "vae": session.vae.key}
    if session.drafter is not None:
        now["drafter"] = session.drafter.key
    if session.scorer is not None:
        now["scorer"] = session.scorer.key
    if session.route_vae is not None:  # a tiny routing decoder decides too: a replay routes on the same one
        now["route_vae"] = session.route_vae.key
    differ = [role for role, key in recorded.items() if now.get(role) != key]
    if differ:
        raise SDVGError(f"{WHAT}: the replay's {', '.join(differ)} differ from the recorded run's: connect the models "
                        f"that run used (the report's live.run.models names them)")
