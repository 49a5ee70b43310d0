"""The stable import surface: `from sdvg_core import ...` (docs/design.md, Public API)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import pytest

import sdvg_core
from sdvg_core import _legacy

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_every_public_name_resolves_to_its_definition():
    assert len(sdvg_core.__all__) == len(set(sdvg_core.__all__))
    assert set(sdvg_core.__all__) == set(sdvg_core._EXPORTS) | {"__version__"}
    for name in sdvg_core.__all__:
        value = getattr(sdvg_core, name)
        if name in sdvg_core._EXPORTS:
            module = importlib.import_module(sdvg_core._EXPORTS[name], "sdvg_core")
            assert getattr(module, name) is value, name
    assert set(sdvg_core.__all__) <= set(dir(sdvg_core))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        sdvg_core.NoSuchName  # noqa: B018


def test_star_import_gives_exactly_the_public_names():
    ns: dict = {}
    exec("from sdvg_core import *", ns)
    assert set(ns) - {"__builtins__"} == set(sdvg_core.__all__)


def _fresh_interpreter(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


_PROBE = """
import json, sys
{body}
mods = sorted(sys.modules)
print(json.dumps({{"comfy": [m for m in mods if m.split('.')[0] in ('comfy', 'comfy_api', 'comfy_execution',
                                                                   'folder_paths', 'nodes', 'server', 'execution')],
                  "ray": [m for m in mods if m.split('.')[0] == 'ray'],
                  "torch": 'torch' in sys.modules}}))
"""


def test_import_sdvg_core_imports_no_comfyui_no_ray_and_no_torch():
    got = _fresh_interpreter(_PROBE.format(body="import sdvg_core"))
    assert got == {"comfy": [], "ray": [], "torch": False}  # lazy: torch only when a name is used


def test_using_every_public_name_still_imports_no_comfyui_and_no_ray():
    got = _fresh_interpreter(_PROBE.format(body="import sdvg_core\nfor n in sdvg_core.__all__: getattr(sdvg_core, n)"))
    assert got["comfy"] == [] and got["ray"] == [] and got["torch"] is True


@pytest.mark.parametrize("old", sorted(_legacy.MOVED))
def test_old_flat_module_paths_are_deprecated_aliases(old):
    new = importlib.import_module(f"sdvg_core.{_legacy.MOVED[old]}")
    sys.modules.pop(f"sdvg_core.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(f"sdvg_core.{old}")
    assert mod is new
    assert any(issubclass(w.category, DeprecationWarning) and new.__name__ in str(w.message) for w in caught)


def test_names_scripts_used_from_the_old_layout():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sdvg_core.policy import ThresholdPolicy
        from sdvg_core.state import GenerationSpec
        from sdvg_core.tiny import tiny_models
        from sdvg_core.wan import CausalWan
    assert (ThresholdPolicy, GenerationSpec, tiny_models, CausalWan) == (
        sdvg_core.ThresholdPolicy, sdvg_core.GenerationSpec, sdvg_core.tiny_models, sdvg_core.CausalWan)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sdvg_core.no_such_module")


def test_the_flat_layouts_engine_and_demo_imports_still_work():
    """`from sdvg_core.engine import Engine` and `from sdvg_core.demo import main` were the flat layout's imports."""
    from sdvg_core.demo import TINY_BLOCKS, main
    from sdvg_core.demo.cli import main as cli_main
    from sdvg_core.engine import Engine, EngineConfig, ProgressEvent
    from sdvg_core.engine.engine import Engine as E2

    assert Engine is E2 and main is cli_main and TINY_BLOCKS > 0 and EngineConfig and ProgressEvent
    import sdvg_core.engine as eng

    with pytest.raises(AttributeError):
        eng.NotAName
