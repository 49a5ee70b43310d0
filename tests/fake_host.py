"""Install the fake ComfyUI host (tests/fake_comfy) and import the pack root as a package named `sdvg_pack`.

The pack is imported from its root `__init__.py` with importlib (as ComfyUI does), never as a top-level `nodes`
package: ComfyUI owns that name. Everything installed is removed again on exit, so other tests never see it.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).resolve().parent / "fake_comfy"
PACK_NAME = "sdvg_pack"
FAKE_ROOTS = ("comfy_api", "comfy", "comfy_execution", "folder_paths", "core_nodes", "server", PACK_NAME)
HOST_MODULES = ("comfy.model_management", "comfy.model_patcher", "comfy.utils", "folder_paths")


def _ours(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in FAKE_ROOTS)


def import_pack() -> ModuleType:
    spec = importlib.util.spec_from_file_location(PACK_NAME, REPO / "__init__.py", submodule_search_locations=[str(REPO)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACK_NAME] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def installed(base: Path) -> Iterator[ModuleType]:
    """Fake host rooted at `base` (models/, output/, temp/); yields the pack module (`.nodes`, `.sdvg_core`)."""
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(FAKE))
    try:
        import folder_paths

        folder_paths.reset(str(base))
        # what the host's modules hold before the pack is imported (a guest must not replace any of it)
        before = {name: dict(vars(importlib.import_module(name))) for name in HOST_MODULES}
        pack = import_pack()
        pack.host_before_import = before
        core_nodes = importlib.import_module("core_nodes")
        core_nodes.SDVG_CORE = importlib.import_module(PACK_NAME + ".sdvg_core")
        importlib.import_module(PACK_NAME + ".sdvg_core.models")
        importlib.import_module(PACK_NAME + ".sdvg_core.io")
        importlib.import_module(PACK_NAME + ".sdvg_core.io.checkpoint")
        importlib.import_module(PACK_NAME + ".sdvg_core.models.vae")
        pack.core_nodes = core_nodes
        yield pack
    finally:
        sys.path.remove(str(FAKE))
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
