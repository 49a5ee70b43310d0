"""torch.compile's own counters per DiT role: graphs compiled and graph breaks while each role's forwards ran.

torch._dynamo.utils.counters is process-wide; the drafter's and the target's forwards never overlap, so reading it
before and after each forward attributes what changed to that role (the benchmarks' `compile: {graph_breaks,
compilations}`, per recipe and role).
"""
from __future__ import annotations

from typing import Any

ROLES = ("drafter", "target")


def _now() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


class CompileCounter:
    """Wraps each role's `forward` while active (`with CompileCounter({"drafter": dit, ...}) as c:`); `counts`:
    {role: {"compilations": n, "graph_breaks": n}} of the forwards made inside."""

    def __init__(self, dits: dict[str, Any]):
        self.dits = {role: dit for role, dit in dits.items() if dit is not None}
        self.counts = {role: {"compilations": 0, "graph_breaks": 0} for role in self.dits}
        self._before: dict[str, Any] = {}

    def __enter__(self) -> "CompileCounter":
        for role, dit in self.dits.items():
            self._before[role] = vars(dit).get("forward")
            forward = dit.forward

            def counted(*a, _f=forward, _role=role, **kw):
                g, b = _now()
                try:
                    return _f(*a, **kw)
                finally:
                    g2, b2 = _now()
                    self.counts[_role]["compilations"] += g2 - g
                    self.counts[_role]["graph_breaks"] += b2 - b

            dit.forward = counted
        return self

    def __exit__(self, *exc) -> None:
        for role, dit in self.dits.items():
            before = self._before.pop(role, None)
            if before is None:
                vars(dit).pop("forward", None)
            else:
                dit.forward = before


def by_recipe(counts: dict[str, dict[str, int]], recipes: dict[str, str]) -> dict[str, dict[str, dict[str, int]]]:
    """{recipe: {role: {graph_breaks, compilations}}}: each role's counts under the name of the recipe it ran."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for role, c in counts.items():
        out.setdefault(recipes[role], {})[role] = {"graph_breaks": c["graph_breaks"], "compilations": c["compilations"]}
    return out


def add(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Role-wise sum of two `counts`."""
    return {role: {k: a.get(role, {}).get(k, 0) + b.get(role, {}).get(k, 0) for k in ("compilations", "graph_breaks")}
            for role in dict.fromkeys([*a, *b])}
