"""Fake comfy.cli_args: the parsed command line, with the switches of the newest hosts (after 0.33.0): the model
compiler (`--disable-comfy-compiler`) and core CUDA graphs (`--disable-cuda-graphs`), both on by default on NVIDIA.
0.33.0 and older hosts have neither (tests remove them to play those hosts)."""
from __future__ import annotations

from types import SimpleNamespace

args = SimpleNamespace(cpu=True, disable_comfy_compiler=False, disable_cuda_graphs=False)
