"""Layering of sdvg_core: models/ is the bottom layer. It never imports io/, engine/ or demo/ (io/ reads files
into models, so an import the other way is a cycle). Checked on the source with ast, imports inside functions too."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "sdvg_core"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
BOTTOM = "models"  # may import only itself (plus the standard library and third-party packages)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
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


def layer_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports of sdvg_core packages other than models/ made by a models/ module."""
    allowed = f"{PACKAGE}.{BOTTOM}"
    return [f"{module}:{line} imports {name}" for line, name in imported_modules(source, module, is_package)
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and not (name == allowed
                                                                             or name.startswith(allowed + "."))]


def test_models_import_nothing_above_them():
    files = sorted((ROOT / BOTTOM).rglob("*.py"))
    assert len(files) >= 5, f"models/ not found under {ROOT}"
    problems = [v for f in files for v in layer_violations(f.read_text(), _module_name(f), f.name == "__init__.py")]
    assert not problems, "models/ must not import io/, engine/ or demo/:\n" + "\n".join(problems)


def test_the_check_sees_every_import_form():
    """The checker itself: relative, absolute, package-level and function-local imports of io are all found."""
    mod = f"{PACKAGE}.{BOTTOM}.vae"
    for bad in ("from ..io.keycheck import CheckpointError", "import sdvg_core.io.checkpoint",
                "from .. import io", "def f():\n    from ..io import checkpoint", "from sdvg_core.engine import state"):
        assert layer_violations(bad, mod), bad
    for fine in ("from .state_dict import KeyLayout", "import torch", "from . import vae_layers",
                 "from sdvg_core.models.wan import WanDiT"):
        assert not layer_violations(fine, mod), fine
