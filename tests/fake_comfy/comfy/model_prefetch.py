"""Fake comfy.model_prefetch (ComfyUI after 0.33): the malloc graph a model records its allocations into while its
forward runs, when the compiler is on (`malloc_graph_enabled` reads comfy.cli_args.args on every call), and
`pause_malloc_graph()`, the host's way to keep allocations out of a recording graph. Records what happened."""
from __future__ import annotations

import threading

from comfy.cli_args import args

RECORDING: dict[int, bool] = {}  # thread -> a graph records now (not paused)
EVENTS: list[str] = []


def malloc_graph_enabled(device=None) -> bool:
    return not args.disable_comfy_compiler


def malloc_graph_begin(device=None) -> None:
    if malloc_graph_enabled(device):
        RECORDING[threading.get_ident()] = True
        EVENTS.append("begin")


def malloc_graph_end() -> None:
    if RECORDING.pop(threading.get_ident(), None) is not None:
        EVENTS.append("end")


class _Pause:
    def __init__(self, sync: bool = False):
        self.sync, self.was = sync, None

    def __enter__(self):
        tid = threading.get_ident()
        self.was = RECORDING.get(tid)
        if self.was:
            RECORDING[tid] = False
            EVENTS.append("pause")

    def __exit__(self, *exc):
        if self.was:
            RECORDING[threading.get_ident()] = True
            EVENTS.append("resume")


def pause_malloc_graph(sync: bool = False) -> _Pause:
    return _Pause(sync)


def recording() -> bool:
    """A graph records this thread's allocations now."""
    return bool(RECORDING.get(threading.get_ident()))
