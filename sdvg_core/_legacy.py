"""Old module paths of sdvg_core (the flat layout before commit d6fffd4) as aliases of the modules that replaced them.

Until 2026-12-03 every module sat directly under sdvg_core/ and the README's module table named them
(`wan.py`, `policy.py`, `state.py`, ...), so scripts imported e.g. `sdvg_core.policy`. Such an import now gets
the moved module itself (same object, not a copy) with a DeprecationWarning naming the new path and the stable
alternative, `from sdvg_core import ...`. Two old modules cannot be aliased: `sdvg_core.engine` and
`sdvg_core.demo` are packages now (their old contents live in sdvg_core.engine.engine and sdvg_core.demo.cli).
Names that moved between modules since (e.g. the ImageReward loaders) are not covered: use `sdvg_core`'s names.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

PACKAGE = __name__.rpartition(".")[0]

# old module (under sdvg_core) -> the module that holds its contents now
MOVED: dict[str, str] = {
    "config": "models.wan_config",
    "wan": "models.wan",
    "vae": "models.vae",
    "vae_layers": "models.vae_layers",
    "reward": "models.reward",
    "reward_config": "models.reward_config",
    "reward_preprocess": "models.reward_preprocess",
    "keycheck": "models.state_dict",
    "loading": "io.checkpoint",
    "reward_io": "io.reward_files",
    "text": "io.text",
    "video": "io.video",
    "memo": "engine.memo",
    "noise": "engine.noise",
    "plot": "engine.plot",
    "policy": "engine.policy",
    "recipes": "engine.recipes",
    "report": "engine.report",
    "schedule": "engine.schedule",
    "state": "engine.state",
    "tiny": "demo.tiny",
}


class _Alias:
    """Finds `sdvg_core.<old>` only when no real module has that name, and loads it as the new module (a meta path
    finder and loader by protocol; importlib.abc is not imported, it would add ~10 ms to `import sdvg_core`)."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.rpartition(".")
        if prefix != PACKAGE or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = f"{PACKAGE}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(f"{spec.name} moved to {new}; for a stable import use `from {PACKAGE} import <name>` "
                      f"(docs/design.md, Public API)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)  # the module itself: sys.modules maps the old name to it

    def exec_module(self, module) -> None:
        pass  # already executed under its new name


def install() -> None:
    """Append the alias finder once (after the real finders, so it never shadows an existing module)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
