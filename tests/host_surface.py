"""The ComfyUI surface the pack relies on, as the CI fakes provide it: every host name the pack's code uses (read
from its source), with the fake's kind and signature and the calls the pack makes, so a real host can be checked
for drift (tests/comfy_surface_probe.py, run with the host's python; tests/test_comfy_host.py).

Names are dotted paths from a host module (`comfy.model_management.load_models_gpu`, `comfy_api.latest.io.Combo.
Input`). Beyond module attributes: methods a pack class overrides on a host base class (`...ModelPatcher.detach`),
and the methods the pack calls on the executor's objects that tests/mini_executor.py stands in for
(`hidden.dynprompt.get_node` -> comfy_execution.graph.DynamicPrompt).
"""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HOST_ROOTS = ("comfy", "comfy_api", "comfy_execution", "folder_paths")
# executor objects a node receives (the pack keeps its hidden dynprompt under this name) -> the host class behind them
EXECUTOR_OBJECTS = {"dynprompt": "comfy_execution.graph.DynamicPrompt"}
# `comfy_api.latest.io` is the real package's `_io` module under that name (the fake's too)
ALIASES = {"comfy_api.latest.io": "comfy_api.latest._io", "comfy_api.latest.ui": "comfy_api.latest._ui"}


def pack_sources() -> list[Path]:
    return [REPO / "__init__.py", *sorted((REPO / "nodes").glob("*.py"))]


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_host(name: str) -> bool:
    return name.split(".")[0] in HOST_ROOTS


class _Scan(ast.NodeVisitor):
    """Host names a module uses: imports give local aliases, attribute chains from them are the names."""

    def __init__(self):
        self.alias: dict[str, str] = {}
        self.used: dict[str, list[tuple[int, list[str]]]] = {}  # name -> calls (positional count, keywords)
        self.overrides: set[str] = set()

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if _is_host(a.name):
                self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0 and _is_host(node.module):
            for a in node.names:
                self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
        self.generic_visit(node)

    def resolve(self, node: ast.AST) -> str | None:
        d = _dotted(node)
        if d is None:
            return None
        head, _, rest = d.partition(".")
        if head in self.alias:
            return self.alias[head] + ("." + rest if rest else "")
        parts = d.split(".")
        for i, p in enumerate(parts[:-1]):  # dynprompt.get_node, cls.hidden.dynprompt.get_node -> DynamicPrompt.get_node
            if p in EXECUTOR_OBJECTS:
                return f"{EXECUTOR_OBJECTS[p]}.{parts[i + 1]}"
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.resolve(node)
        if name is not None:
            self.used.setdefault(name, [])
            return  # the longest chain is the name
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.alias:
            self.used.setdefault(self.alias[node.id], [])

    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(node.func)
        if name is not None and not any(isinstance(a, ast.Starred) for a in node.args) and \
                all(k.arg is not None for k in node.keywords):
            self.used.setdefault(name, []).append((len(node.args), sorted(k.arg for k in node.keywords)))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            b = self.resolve(base)
            if b is not None:
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("__"):
                        self.overrides.add(f"{b}.{item.name}")
        self.generic_visit(node)


def _scans() -> list[_Scan]:
    scans = []
    for path in pack_sources():
        scan = _Scan()
        scan.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        scans.append(scan)
    return scans


def pack_uses() -> dict[str, list[tuple[int, list[str]]]]:
    """{host name: [(positional count, keyword names) per call site]} over the pack's ComfyUI glue."""
    used: dict[str, list] = {}
    for scan in _scans():
        for name, calls in scan.used.items():
            used.setdefault(name, []).extend(calls)
    return used


def optional_names() -> tuple[str, ...]:
    """Host names the pack reads only where the host has them (nodes/comfy_compiler.py OPTIONAL_HOST_NAMES: the
    newest hosts' model compiler), read from its source: checked against a host that has them, absent elsewhere."""
    tree = ast.parse((REPO / "nodes" / "comfy_compiler.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "OPTIONAL_HOST_NAMES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


def pack_overrides() -> set[str]:
    """`<host class>.<method>` for each method a pack class defines on a host base class (an override where the
    host has the method, a method of the pack's own otherwise)."""
    return {name for scan in _scans() for name in scan.overrides}


def resolve(name: str) -> Any:
    """The object at a dotted host path (the longest importable module prefix, then attributes); raises on none."""
    for alias, real in ALIASES.items():
        if name == alias or name.startswith(alias + "."):
            name = real + name[len(alias):]
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(name)


def describe(obj: Any) -> dict:
    """Kind and signature: {"kind": class/routine/module/value, "params": [[name, kind, has default]], "var_kw": bool,
    "widget_kwargs": [...] (a fake V3 input's accepted widget keywords)}."""
    kind = "class" if inspect.isclass(obj) else "module" if inspect.ismodule(obj) else \
        "routine" if callable(obj) else "value"
    out: dict = {"kind": kind}
    if kind in ("class", "routine"):
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return out
        params = [p for p in sig.parameters.values() if p.name != "self"]
        out["params"] = [[p.name, p.kind.name, p.default is not p.empty] for p in params
                         if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        out["var_kw"] = any(p.kind == p.VAR_KEYWORD for p in params)
        out["var_pos"] = any(p.kind == p.VAR_POSITIONAL for p in params)
        allowed = getattr(obj, "allowed", None)
        if isinstance(allowed, frozenset):
            out["widget_kwargs"] = sorted(allowed)
    return out


def fake_surface() -> dict[str, dict]:
    """{host name the pack uses that the fake host provides: {"fake": describe(...), "calls": [...]}}. Must run while
    tests/fake_host.installed is active (the fake modules importable)."""
    out = {}
    names = {**{o: [] for o in pack_overrides()}, **{o: [] for o in optional_names()}, **pack_uses()}
    for name, calls in sorted(names.items()):
        try:
            obj = resolve(name) if not name.startswith(tuple(EXECUTOR_OBJECTS.values())) else _executor_fake(name)
        except (ImportError, AttributeError):
            continue  # not provided by the fake (e.g. comfy.ldm, used only where the host has it)
        out[name] = {"fake": describe(obj), "calls": sorted({(n, tuple(k)) for n, k in calls})}
    return out


def _executor_fake(name: str) -> Any:
    import mini_executor

    cls, method = name.rsplit(".", 1)
    return getattr(mini_executor.DynamicPrompt, method)


def drift(entry: dict, real: dict | None) -> list[str]:
    """What differs between a fake's description and the real host's for one name, and which of the pack's calls
    the real signature would refuse (empty when none)."""
    if real is None:
        return ["missing on the host"]
    fake, out = entry["fake"], []
    if fake["kind"] != real["kind"]:
        return [f"a {real['kind']} on the host, a {fake['kind']} in the fake"]
    if "params" not in fake or "params" not in real:
        return out
    real_names = [p[0] for p in real["params"]]
    accepted = set(real_names) if not real["var_kw"] else None
    fake_kw = [p[0] for p in fake["params"]] + fake.get("widget_kwargs", [])
    if accepted is not None:
        extra = [k for k in fake_kw if k not in accepted]
        if extra:
            out.append(f"the fake accepts {extra}, the host does not (host takes {real_names})")
    fake_pos = [p[0] for p in fake["params"] if p[1] == "POSITIONAL_OR_KEYWORD"]
    real_pos = [p[0] for p in real["params"] if p[1] in ("POSITIONAL_OR_KEYWORD", "POSITIONAL_ONLY")]
    n = max([c[0] for c in entry["calls"]] or [0])  # the positions the pack fills must mean the same on both
    if fake_pos[:n] != real_pos[:n] and not real.get("var_pos"):
        out.append(f"positional parameters the pack fills: host {real_pos[:n]}, fake {fake_pos[:n]}")
    required = [p[0] for p in real["params"] if not p[2] and p[1] != "KEYWORD_ONLY"]
    required_kw = [p[0] for p in real["params"] if not p[2] and p[1] == "KEYWORD_ONLY"]
    for n_pos, kws in entry["calls"]:
        if n_pos > len(real_pos) and not real.get("var_pos"):
            out.append(f"the pack passes {n_pos} positional arguments, the host takes {len(real_pos)}")
        bad = [k for k in kws if accepted is not None and k not in accepted]
        if bad:
            out.append(f"the pack passes {bad}, the host does not take them")
        given = set(real_pos[:n_pos]) | set(kws)
        missing = [p for p in required + required_kw if p not in given]
        if missing:
            out.append(f"the pack's call ({n_pos} positional, {list(kws)}) leaves out required {missing}")
    return out
