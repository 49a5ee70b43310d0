"""Layering of sdvg_core, bottom up: models/ (the networks) imports nothing of sdvg_core; io/ (files in) only models/;
derived/ (the memo, its keys, the account of work, digests) nothing; sampling/ (timesteps, the denoising loop) only
models/; given/ (a run's given pixels) only those four, never the engine; the engine, the command line and the live
loop sit above. No two modules import each other, directly or around a circle, in sdvg_core, sdvg_eval or nodes.
Checked on the source with ast, imports inside functions and under TYPE_CHECKING too."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "sdvg_core"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
BOTTOM = "models"  # may import only itself (plus the standard library and third-party packages)
# each lower layer and the sdvg_core packages it may import (itself, and the layers under it)
LAYERS = {BOTTOM: (BOTTOM,), "io": ("io", BOTTOM), "derived": ("derived",), "sampling": ("sampling", BOTTOM),
          "given": ("given", BOTTOM, "io", "derived", "sampling")}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement in `source`, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from .. import io` names the module in the alias
            found += [(node.lineno, name)] if node.module else [(node.lineno, f"{name}.{a.name}") for a in node.names]
    return found


def layer_violations(source: str, module: str, is_package: bool = False, allowed: tuple[str, ...] = (BOTTOM,)
                     ) -> list[str]:
    """Imports of sdvg_core packages other than `allowed` (default: models/ alone) made by a module."""
    ok = [f"{PACKAGE}.{a}" for a in allowed]
    return [f"{module}:{line} imports {name}" for line, name in imported_modules(source, module, is_package)
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and not any(name == a or name.startswith(a + ".")
                                                                             for a in ok)]


def _layer_problems(layer: str) -> list[str]:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert len(files) >= 3, f"{layer}/ not found under {ROOT}"
    return [v for f in files for v in layer_violations(f.read_text(), _module_name(f), f.name == "__init__.py",
                                                       LAYERS[layer])]


def test_models_import_nothing_above_them():
    problems = _layer_problems(BOTTOM)
    assert not problems, "models/ must not import io/, engine/ or demo/:\n" + "\n".join(problems)


def test_io_imports_only_models():
    """Files in: io/ never imports engine/, given/ or demo/ (command-line parsing lives with the command line)."""
    problems = _layer_problems("io")
    assert not problems, "io/ must import only models/ (and itself):\n" + "\n".join(problems)
    io_mod = f"{PACKAGE}.io.checkpoint"
    assert layer_violations("from ..engine.recipes import RECIPE_NAMES", io_mod, allowed=LAYERS["io"])
    assert layer_violations("from ..given.read import PixelInputError", io_mod, allowed=LAYERS["io"])
    assert not layer_violations("from ..models.state_dict import CheckpointError", io_mod, allowed=LAYERS["io"])
    assert not layer_violations("from .lora import merge", io_mod, allowed=LAYERS["io"])


def test_the_check_sees_every_import_form():
    """The checker itself: relative, absolute, package-level and function-local imports of io are all found."""
    mod = f"{PACKAGE}.{BOTTOM}.vae"
    for bad in ("from ..io.keycheck import CheckpointError", "import sdvg_core.io.checkpoint",
                "from .. import io", "def f():\n    from ..io import checkpoint", "from sdvg_core.engine import state"):
        assert layer_violations(bad, mod), bad
    for fine in ("from .state_dict import KeyLayout", "import torch", "from . import vae_layers",
                 "from sdvg_core.models.wan import WanDiT"):
        assert not layer_violations(fine, mod), fine


def test_derived_sampling_and_given_sit_below_the_engine():
    """given/ depends on the engine's lower layers, never on the engine (the engine imports given/, one way only)."""
    for layer in ("derived", "sampling", "given"):
        problems = _layer_problems(layer)
        assert not problems, f"{layer}/ may import only {LAYERS[layer]}:\n" + "\n".join(problems)
    given = f"{PACKAGE}.given.pixels"
    assert layer_violations("from ..engine.memo import Memoiser", given, allowed=LAYERS["given"])
    assert not layer_violations("from ..derived.memo import Memoiser", given, allowed=LAYERS["given"])


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (a `from package import name` counts as the package)."""
    files = {_module_name(f, root): f for f in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        deps = set()
        for _, imported in imported_modules(f.read_text(), name, f.name == "__init__.py"):
            while imported and imported not in files:  # `from .recipes import KreaRecipe` -> the package
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                deps.add(imported)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph: each a path a -> ... -> a found by depth-first search."""
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(v: str, path: list[str]) -> None:
        state[v] = 1
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                found.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v, [v])
    return found


def test_no_import_circles_in_sdvg_core():
    graph = import_graph()
    assert len(graph) >= 40 and "sdvg_core.io.lora" in graph["sdvg_core.io.checkpoint"]
    assert circles(graph) == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles(graph))


@pytest.mark.parametrize("package", ["sdvg_eval", "nodes"])
def test_no_import_circles_in_the_evaluation_or_the_nodes(package):
    graph = import_graph(ROOT.parent / package)
    assert len(graph) >= 8
    assert circles(graph) == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles(graph))


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


# the modules that take given pixels from a person: the command lines' flags and rows, the nodes' inputs
PIXEL_CALLERS = ("sdvg_core/demo/pixel_args.py", "sdvg_eval/prompts.py", "sdvg_eval/eval.py", "nodes/session.py",
                 "nodes/start.py", "nodes/generate.py")


def pixel_rule_copies(source: str) -> list[str]:
    """What a caller of the given-pixels rules must not spell out again: a strength (a default or a recipe's lowest),
    a mode's word as a literal, a recipe picked by comparing its name's text."""
    from sdvg_core.engine.recipes import RECIPE_NAMES
    from sdvg_core.given.request import DEFAULT_STRENGTH, PIXEL_MODES

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value in (DEFAULT_STRENGTH, 0.25):
            found.append(f"line {node.lineno}: the strength {node.value}")
        elif isinstance(node, ast.Constant) and node.value in PIXEL_MODES:
            found.append(f"line {node.lineno}: the mode word {node.value!r}")
        elif isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in RECIPE_NAMES
                                                   for c in [node.left, *node.comparators]):
            found.append(f"line {node.lineno}: a recipe picked by its name")
    return sorted(found)


def test_the_given_pixel_rules_are_stated_once_in_the_core():
    """The strength's default and range, a recipe's lowest strength, the modes and their words live in
    sdvg_core/given (and the recipes' plans); the command lines, the evaluation rows and the nodes ask for them."""
    repo = ROOT.parent
    problems = {f: pixel_rule_copies((repo / f).read_text()) for f in PIXEL_CALLERS}
    assert not {f: p for f, p in problems.items() if p}, problems
    copies = 'low = [r for r in recipes if r.split(":")[0] != "krea"]\nDEFAULT = 0.7\nif mode == "extend": pass\n'
    assert pixel_rule_copies(copies) == ["line 1: a recipe picked by its name", "line 2: the strength 0.7",
                                         "line 3: the mode word 'extend'"]
