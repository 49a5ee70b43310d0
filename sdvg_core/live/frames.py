"""A live input: frames that arrive while the run plays (a page's camera, a video file played as a camera), a bounded
buffer with a drop rule, and the record of the frames each block used.

The producer pushes frames at its own rate (`FrameBuffer.push`, any thread); at each block boundary the run takes the
newest frames the block needs (`take`) and the older ones are dropped and counted, so a run slower than its camera
restyles what the camera shows now, not what it showed a minute ago. The frames taken are appended to the run's
recording (`LiveSource`, raw RGB beside the output): the engine reads a block's input from there like from a file, and
a replay reads the same bytes back (`open_recording`), because it cannot ask the camera again.
"""
from __future__ import annotations

import hashlib
import io
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from ..given.fit import as_vae_frames
from .controls import LiveRequestError

# One camera frame (a JPEG or PNG of the run's size; 832x480 RGB is 1.2 MB raw): 8 MiB leaves room for any image
# format at the sizes SDVG runs, and refuses a body that is not a frame.
MAX_FRAME_BYTES = 8 * 1024 * 1024
# Frames the buffer keeps: two blocks' worth on the run's clock (a block reads 12 pixel frames, 0.75 s at 16 fps).
BUFFER_BLOCKS = 2
FRAMES_PER_BLOCK_PIXELS = 12
# How long a block boundary waits for the frames it needs before the run ends (the camera stopped or never started).
WAIT_S = 30.0
POLL_S = 0.05  # how often the wait looks again (and at Stop)
RECORDING_SUFFIX = ".rgb"


def decode_frame(body: bytes, run_hw: tuple[int, int]) -> torch.Tensor:
    """A camera frame's bytes (JPEG, PNG, WebP) -> uint8 [H, W, 3] at the run's size (the fit rule: centre crop to the
    run's aspect, then resize). 413 when the body is larger than a frame can be, 400 when it is not a picture."""
    from PIL import Image, UnidentifiedImageError

    if len(body) > MAX_FRAME_BYTES:
        raise LiveRequestError(413, f"the frame is {len(body):,} bytes; a frame takes at most {MAX_FRAME_BYTES:,}")
    if not body:
        raise LiveRequestError(400, "the frame is empty: send a JPEG or PNG picture")
    try:
        with Image.open(io.BytesIO(body)) as im:
            if im.width * im.height > 64 * run_hw[0] * run_hw[1]:  # a decompression bomb, not a camera frame
                raise LiveRequestError(413, f"the frame is {im.width}x{im.height}; send it at about the run's size "
                                            f"{run_hw[1]}x{run_hw[0]}")
            rgb = np.asarray(im.convert("RGB"))
    except LiveRequestError:  # a ValueError itself: keep its status (413 above), not the 400 below
        raise
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise LiveRequestError(400, f"the frame is not a picture the server can read: {e}") from None
    frames = torch.from_numpy(rgb.copy()).unsqueeze(0)  # [1, H, W, 3] uint8
    if tuple(frames.shape[1:3]) == tuple(run_hw):
        return frames[0]
    fitted = (as_vae_frames(frames, run_hw)[0, :, 0] * 0.5 + 0.5)  # [3, H, W] in [0, 1]
    return (fitted.permute(1, 2, 0) * 255).round().clamp(0, 255).to(torch.uint8)


class FrameBuffer:
    """Frames pushed by a producer, at most `capacity` kept (the oldest dropped and counted when it is full)."""

    def __init__(self, capacity: int = BUFFER_BLOCKS * FRAMES_PER_BLOCK_PIXELS):
        self.capacity = capacity
        self._frames: list[torch.Tensor] = []
        self._cond = threading.Condition()
        self.received = 0
        self.dropped = 0
        self.closed = False  # the producer has no more frames (a file played to its end)

    def push(self, frame: torch.Tensor) -> None:
        """One frame uint8 [H, W, 3] of the run's size."""
        with self._cond:
            self._frames.append(frame)
            self.received += 1
            while len(self._frames) > self.capacity:
                self._frames.pop(0)
                self.dropped += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def take(self, n: int, stopped: Callable[[], bool] = lambda: False, wait_s: float = WAIT_S) -> torch.Tensor | None:
        """The newest `n` frames [n, H, W, 3] once the buffer has them (the older ones are dropped and counted), or
        None when they do not come within `wait_s`, the producer closed, or `stopped()` says the run ends."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            while len(self._frames) < n:
                if self.closed or stopped() or time.monotonic() >= deadline:
                    return None
                self._cond.wait(POLL_S)
            taken = self._frames[-n:]
            self.dropped += len(self._frames) - n
            self._frames = []
            return torch.stack(taken)


class _Growing:
    """Frames [start, stop) of a recording, one piece per frame; an iterator that has run out of recorded frames
    gives more once more are recorded (the engine's input reader reads forward through it, block after block)."""

    def __init__(self, source: "LiveSource", run_hw: tuple[int, int], start: int, stop: int | None):
        self.source, self.run_hw, self.i, self.stop = source, run_hw, start, stop

    def __iter__(self) -> "_Growing":
        return self

    def __next__(self) -> torch.Tensor:
        if (self.stop is not None and self.i >= self.stop) or self.i >= self.source.recorded:
            raise StopIteration
        frame = self.source.frame(self.i)
        self.i += 1
        return as_vae_frames(frame.unsqueeze(0), self.run_hw)


class LiveSource:
    """The frames a live run's blocks used, as the engine reads a video to restyle (given/sources.py FrameSource):
    recorded as they are taken (raw RGB, uint8, appended to `path`) and read back by index. `digest` names the input in
    the run's lineage: a live session's own, which its replay keeps."""

    def __init__(self, path: str | Path, hw: tuple[int, int], digest: str, name: str = "live input"):
        self.path, self.hw, self.digest, self.name = Path(path), tuple(hw), digest, name
        self.recorded = self.path.stat().st_size // self.frame_bytes if self.path.exists() else 0
        self._recent: dict[int, torch.Tensor] = {}  # the newest frames, kept until the encoder has read them
        self._lock = threading.Lock()

    @property
    def frame_bytes(self) -> int:
        return self.hw[0] * self.hw[1] * 3

    def record(self, frames: torch.Tensor) -> tuple[int, int]:
        """Append frames [n, H, W, 3] uint8 to the recording; returns (first index, n)."""
        if frames.dtype != torch.uint8 or tuple(frames.shape[1:]) != (*self.hw, 3):
            raise ValueError(f"recorded frames must be uint8 [n, {self.hw[0]}, {self.hw[1]}, 3], got "
                             f"{frames.dtype} {list(frames.shape)}")
        with self._lock:
            first = self.recorded
            with open(self.path, "ab") as f:
                f.write(frames.contiguous().numpy().tobytes())
            for k in range(frames.shape[0]):
                self._recent[first + k] = frames[k].clone()
            self.recorded += frames.shape[0]
            for old in [i for i in self._recent if i < self.recorded - BUFFER_BLOCKS * FRAMES_PER_BLOCK_PIXELS]:
                del self._recent[old]
            return first, int(frames.shape[0])

    def frame(self, i: int) -> torch.Tensor:
        """Recorded frame i, uint8 [H, W, 3]."""
        with self._lock:
            held = self._recent.get(i)
        if held is not None:
            return held
        if not 0 <= i < self.recorded:
            raise IndexError(f"frame {i} is not recorded ({self.recorded} are)")
        with open(self.path, "rb") as f:
            f.seek(i * self.frame_bytes)
            data = f.read(self.frame_bytes)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(*self.hw, 3)

    # ---- the FrameSource protocol (given/sources.py)
    def source_hw(self) -> tuple[int, int]:
        return self.hw

    def count(self) -> int:
        return self.recorded

    def pieces(self, run_hw, start=0, stop=None, piece_frames=1) -> Iterator[torch.Tensor]:
        return _Growing(self, tuple(run_hw), start, stop)

    def timing(self) -> dict:
        return {"source_fps": None, "frame_rate": None}


def live_digest(session: str) -> str:
    """The digest that names a live session's input in its lineage."""
    return "live:" + hashlib.blake2b(session.encode(), digest_size=12).hexdigest()


def open_recording(path: str | Path, hw: tuple[int, int], digest: str) -> LiveSource:
    """A recorded live input read back for a replay (ValueError when the file is missing or not whole frames)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"the live run's recorded input {p} is not there: a replay needs the frames the run used "
                         f"(they are written beside its report)")
    size, frame = p.stat().st_size, hw[0] * hw[1] * 3
    if size % frame:
        raise ValueError(f"{p} holds {size:,} bytes, not whole frames of {hw[1]}x{hw[0]} RGB ({frame:,} bytes each)")
    return LiveSource(p, hw, digest, name=f"recorded live input {p.name}")
