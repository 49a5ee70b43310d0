"""The stable import surface: `from sdvg_core import ...` (docs/design.md, Public API)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import sdvg_core

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


@pytest.mark.slow
def test_using_every_public_name_still_imports_no_comfyui_and_no_ray():
    got = _fresh_interpreter(_PROBE.format(body="import sdvg_core\nfor n in sdvg_core.__all__: getattr(sdvg_core, n)"))
    assert got["comfy"] == [] and got["ray"] == [] and got["torch"] is True


def test_every_public_name_has_a_typed_import_from_its_module():
    """The TYPE_CHECKING imports (what IDEs see) name exactly the public names, each from the module _EXPORTS
    gives it (which has it)."""
    import ast

    tree = ast.parse((REPO / "sdvg_core" / "__init__.py").read_text())
    typed = {alias.name: "." + node.module for guard in tree.body
             if isinstance(guard, ast.If) and getattr(guard.test, "id", "") == "TYPE_CHECKING"
             for node in guard.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert typed == sdvg_core._EXPORTS
    for name, module in sdvg_core._EXPORTS.items():
        assert hasattr(importlib.import_module(module, "sdvg_core"), name), name


def test_no_import_hook_and_no_old_module_paths():
    """`import sdvg_core` installs nothing on sys.meta_path; the flat layout's module paths do not import."""
    probe = _fresh_interpreter("import sys, json\nbefore = len(sys.meta_path)\nimport sdvg_core\n"
                               "print(json.dumps({'hooks': len(sys.meta_path) - before}))")
    assert probe == {"hooks": 0}
    for old in ("policy", "wan", "state", "tiny", "memo"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"sdvg_core.{old}")
