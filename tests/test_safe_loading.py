"""Every torch.load in the repository reads plain weights only (`weights_only=True`): a pickle checkpoint could
otherwise run code when it is opened. Checked on the source with ast, calls inside functions and tests too."""
from __future__ import annotations

import pytest
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("sdvg_core", "sdvg_eval", "nodes", "bench", "scripts", "tests", "__init__.py")


def unsafe_loads(source: str) -> list[int]:
    """Lines of `torch.load(...)` / `load(...)`-from-torch calls whose weights_only is not the literal True."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "torch":
            kw = {k.arg: k.value for k in node.keywords}
            value = kw.get("weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                bad.append(node.lineno)
    return bad


def _files():
    for name in SOURCES:
        p = REPO / name
        yield from ([p] if p.is_file() else sorted(p.rglob("*.py")))


@pytest.mark.slow
def test_every_torch_load_is_weights_only():
    found = {str(p.relative_to(REPO)): lines for p in _files() if (lines := unsafe_loads(p.read_text()))}
    assert not found, f"torch.load without weights_only=True: {found}"


def test_the_check_sees_an_unsafe_load():
    assert unsafe_loads("import torch\nx = torch.load('a.pt')\ny = torch.load('b.pt', weights_only=False)\n") == [2, 3]
    assert unsafe_loads("import torch\nx = torch.load('a.pt', map_location='cpu', weights_only=True)\n") == []
