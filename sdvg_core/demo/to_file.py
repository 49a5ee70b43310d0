"""One demo generation: each committed block's frames go to the video file as it commits, the heap is trimmed as
blocks go by, and Ctrl-C or SIGTERM stops the run between two blocks' writes, keeping a playable video of what was
committed: the file is finished (the writer's ffmpeg child waited for) before the process goes on.
"""
from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..engine.engine import Engine
from ..engine.heap import HeapTrimmer
from ..engine.policy import Policy
from ..engine.state import GenerationState
from ..io.video import VideoWriter
from .cli_args import STOP_SIGNALS, raise_for


class DeferredInterrupt:
    """Stop-signal handling for a run (SIGINT and SIGTERM alike): a signal raises at once (KeyboardInterrupt, or
    cli_args.Terminated for SIGTERM), except inside `critical()` (a block's frames being written), where it is held
    until the section ends, so the file never ends in half a block; after `hold()` or a first signal (the video
    being closed, the report written) further ones are ignored."""

    def __init__(self) -> None:
        self._critical = False
        self._pending: int | None = None
        self._held = False
        self._previous: dict = {}

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self._held:
            return
        if self._critical:
            self._pending = signum
        else:
            self._held = True  # one signal ends the run; a second one must not cut the files it leaves short
            raise_for(signum)

    def hold(self) -> None:
        """From now on Ctrl-C does nothing: what is left is finishing the files."""
        self._held = True

    @contextmanager
    def critical(self) -> Iterator[None]:
        self._critical = True
        try:
            yield
        finally:
            self._critical = False
        if self._pending is not None:
            signum, self._pending, self._held = self._pending, None, True
            raise_for(signum)


@dataclass(frozen=True)
class RunOutcome:
    """What a run left: the last state whose frames are all in the file (None: stopped by a signal before a block
    committed), the block that was being computed when a stop signal came (None: the run finished) and the exception
    it raised, the video file and its frame count."""

    state: GenerationState | None
    interrupted_at: int | None
    video: Path
    frames: int
    wall_seconds: float
    signal_exc: BaseException | None = None

    @property
    def committed(self) -> int:
        return len(self.state.blocks) if self.state is not None else 0


def generate_to_file(engine: Engine, start: GenerationState, policy: Policy, video: Path, guard: DeferredInterrupt,
                     trimmer: HeapTrimmer | None = None,
                     on_written: Callable[[GenerationState], None] | None = None,
                     boundary: Callable | None = None) -> RunOutcome:
    """Run every block of the started run (`Engine.start`'s state), writing each committed block's frames to `video`. Ctrl-C (SIGINT, through the
    installed `guard`) ends the run after the last block fully written; the file is closed either way and Ctrl-C
    is held from then on. A video without any block is removed."""
    written: list[GenerationState] = []
    interrupted_at, caught = None, None
    t0 = time.perf_counter()
    writer = VideoWriter(video)

    def on_block(eng: Engine, st: GenerationState) -> None:
        with guard.critical():
            for piece in eng.output_frames(st, st.next_block - 1):  # block 0's come after the given frames
                writer.write(piece)
            written[:] = [st]
        if trimmer is not None:
            trimmer.block_done()
        if on_written is not None:
            on_written(st)

    try:
        final = engine.generate(start.spec, policy, on_block=on_block, state=start, boundary=boundary)
        if final.stopped is not None:  # the input ended the run (or broke): the state says so (report)
            written[:] = [final]
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (cli_args.Terminated)
        interrupted_at, caught = (written[0].next_block if written else 0), e
    finally:
        guard.hold()
        writer.close()  # waits for the writer's ffmpeg child: the file is complete when this returns
    wall = time.perf_counter() - t0
    if writer.frames_written == 0 and video.exists():
        video.unlink()  # no frame in it: not a video
    return RunOutcome(written[0] if written else None, interrupted_at, writer.path, writer.frames_written, wall, caught)
