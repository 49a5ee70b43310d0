"""Live runs: an ordinary SDVG run whose per-block settings arrive late (docs/live.md).

Tau, the prompt, the drafter on or off, a video-to-video run's strength and its input frames are read once per block,
at the boundary before it, from a control source (controls.py, thread-safe: a server's request handlers set, the run
reads), and written into the run's timeline (timeline.py). Everything after that is the engine as it is. The record of
a live run is therefore a schedule, and a replay is a run of that schedule: the same seed, the same bits (session.py,
`replay`). A camera is a frame source like a file, with a bounded buffer and a drop rule; the frames a block used are
recorded beside the output, because a replay cannot ask the camera again (frames.py). Pure torch and Python: the
ComfyUI node and the page only carry these.
"""
