"""The embedded default: tiny random models of the exact architectures and the command-line demo.

The flat layout's `sdvg_core.demo` module (before commit d6fffd4) was the command line itself: its public names
(`main`, `parse_args`, the size defaults) are forwarded, lazily, to demo/cli.py.
"""
from __future__ import annotations

import importlib

_CLI_NAMES = ("main", "parse_args", "TINY_SIZE", "TINY_BLOCKS", "TINY_DEMO_TAU", "REAL_SIZE", "REAL_BLOCKS")


def __getattr__(name: str):
    if name in _CLI_NAMES:
        return getattr(importlib.import_module(f"{__name__}.cli"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
