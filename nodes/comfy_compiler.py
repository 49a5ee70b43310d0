"""SDVG and the newest hosts' model compiler ("Comfy Compiler", docs/comfyui.md "Newest hosts").

On NVIDIA, ComfyUI builds after 0.33 plan a model call's allocations once and replay them (comfy-aimdo's malloc graph,
with CUDA graphs on top). The switch is `comfy.cli_args.args.disable_comfy_compiler` (`--disable-comfy-compiler`),
read on every model call (`comfy.model_prefetch.malloc_graph_enabled`), and `args.disable_cuda_graphs` for the graphs;
a model opens its graph in its own forward, before any DIFFUSION_MODEL wrapper runs. Kernels a pack runs itself while a
graph records are allocations the planner did not plan ("aimdo memory compile error"). SDVG runs its own kernels on
ComfyUI's layers, so while it runs it turns the compiler off and puts the switches back afterwards, whatever happens
(`compiler_off`: a user who started ComfyUI with the compiler off is left as is); where the host can pause a graph
already recording on this thread (`comfy.model_prefetch.pause_malloc_graph`) it pauses it too. Each switch is set where
the host has it: the 0.33.0 snapshot has only `disable_cuda_graphs` (its per-block CUDA graphs under Dynamic VRAM,
comfy/model_prefetch.py), 0.3.64 and the 0.12.1 pip build neither (the pip build's `args` answers None for any
name): then nothing changes.

Where the scope starts matters: a graph opens inside a model's forward, before its DIFFUSION_MODEL wrappers, so a
switch flipped there is too late. Packs whose kernels run inside core's sampling flip it in an OUTER_SAMPLE wrapper
registered on their MODEL. SDVG's AR sampler is a SAMPLER: core calls it inside the guider's outer sample (after the
MODEL's OUTER_SAMPLE wrappers were collected, before any model call), and it enters the scope there, before its first
model call; SDVG Generate and the step nodes enter it around their own work (nodes/hosted.py: every model call).
SDVG never calls a core model's forward (it calls the layers), so no graph of its own making records under it.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any, Iterator

# The host names this module reads where the host has them (tests/host_surface.py checks those a host has against the
# CI fakes, and leaves out those it lacks: every one is optional here).
OPTIONAL_HOST_NAMES = ("comfy.cli_args.args.disable_comfy_compiler", "comfy.cli_args.args.disable_cuda_graphs",
                       "comfy.model_prefetch.pause_malloc_graph",)
SWITCHES = ("disable_comfy_compiler", "disable_cuda_graphs")  # set True while SDVG runs, then restored

_LOCK = threading.Lock()


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def host_args() -> Any:
    """ComfyUI's parsed command line (comfy.cli_args.args), or None outside ComfyUI."""
    return getattr(_module("comfy.cli_args"), "args", None)


def host_switches() -> tuple[str, ...]:
    """The switches this host has (after 0.33.0 both; the 0.33.0 snapshot only CUDA graphs'; older hosts none): command
    line flags, so booleans (the 0.12.1 pip build's `args` answers None for any name it does not have)."""
    args = host_args()
    return tuple(name for name in SWITCHES if isinstance(getattr(args, name, None), bool))


@contextlib.contextmanager
def compiler_off() -> Iterator[tuple[str, ...]]:
    """The model compiler and CUDA graphs off while the block runs (each switch the host has), the switches as they
    were afterwards (also on an error or a Cancel); yields the switches set. Nested scopes restore what they found."""
    args = host_args()
    names = host_switches()
    with _LOCK:
        saved = {name: getattr(args, name) for name in names}
        for name in names:
            setattr(args, name, True)
    try:
        with paused_graph():
            yield names
    finally:
        with _LOCK:
            for name, value in saved.items():
                setattr(args, name, value)


def paused_graph() -> Any:
    """The host's pause of a malloc graph recording on this thread (a no-op when none records), else a no-op."""
    pause = getattr(_module("comfy.model_prefetch"), "pause_malloc_graph", None)
    return pause() if callable(pause) else contextlib.nullcontext()
