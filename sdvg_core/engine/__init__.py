"""The SDVG algorithm: immutable state, recipes, routing policies, memo, orchestration, report.

`from sdvg_core.engine import Engine` keeps working from the flat layout (sdvg_core/engine.py before commit d6fffd4):
that module's public names are forwarded, lazily, to engine.engine where they live now. New code imports from
`sdvg_core` itself (docs/design.md §3.5).
"""
from __future__ import annotations

import importlib

# the old flat engine.py's public names, now in engine/engine.py
_ENGINE_NAMES = ("Engine", "EngineConfig", "ProgressEvent", "Callbacks", "Scorer", "DecodeEntry", "to_image", "PHASES",
                 "WORK_KEYS", "DEFAULT_MEMO_BYTES")


def __getattr__(name: str):
    if name in _ENGINE_NAMES:
        return getattr(importlib.import_module(f"{__name__}.engine"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
