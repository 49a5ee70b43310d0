"""Start a real ComfyUI's modules in-process for the probes (run with ComfyUI's python): parse its arguments (`--cpu`
plus `extra`), import its `utils` package before nodes.py shadows it (upstream) or prepare the pip build's vanilla
environment, and import the pack from `repo` as the package `sdvg_pack`, as ComfyUI imports a custom node."""
from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType


def start(comfy_dir: str, extra: tuple[str, ...] = (), cpu: bool = True) -> None:
    sys.argv = [sys.argv[0], *(["--cpu"] if cpu else []), *extra]
    sys.path.insert(0, comfy_dir)
    os.chdir(comfy_dir)
    import comfy.options

    comfy.options.enable_args_parsing()
    if os.path.isdir(os.path.join(comfy_dir, "utils")):  # upstream checkout
        import utils.extra_config  # noqa: F401  (ComfyUI's utils package before nodes.py shadows it)
    else:  # the pip-installable build: its shims for the top-level modules packs import (folder_paths, ...)
        from comfy_compatibility.vanilla import prepare_vanilla_environment

        prepare_vanilla_environment()


def import_pack(repo: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("sdvg_pack", os.path.join(repo, "__init__.py"),
                                                  submodule_search_locations=[repo])
    pack = importlib.util.module_from_spec(spec)
    sys.modules["sdvg_pack"] = pack
    spec.loader.exec_module(pack)
    return pack
