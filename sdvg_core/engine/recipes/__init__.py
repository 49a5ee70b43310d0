"""Context recipes, one per model role (docs/design.md §2.3): `krea` (the published SDVG pairing), `self_forcing`,
`longlive` (frame sink + sliding window; `longlive_infinity`: its slot-relative RoPE variant).

`recipe_by_name` builds one from its command-line / node name.
"""
from __future__ import annotations

from .base import ContextHost, Recipe
from .krea import KreaRecipe
from .longlive import LongLiveRecipe
from .self_forcing import SelfForcingRecipe

__all__ = ["ContextHost", "Recipe", "KreaRecipe", "SelfForcingRecipe", "LongLiveRecipe", "RECIPE_NAMES",
           "recipe_by_name", "check_prompt_switches"]

RECIPE_NAMES = ("krea", "self_forcing", "longlive", "longlive_infinity")


def recipe_by_name(name: str) -> Recipe:
    """The recipe called `name` with its reference defaults."""
    if name == "krea":
        return KreaRecipe()
    if name in ("self_forcing", "self-forcing"):
        return SelfForcingRecipe()
    if name == "longlive":
        return LongLiveRecipe()
    if name in ("longlive_infinity", "longlive-infinity"):
        return LongLiveRecipe(variant="infinity")
    raise ValueError(f"unknown context recipe {name!r}; use one of {', '.join(RECIPE_NAMES)}")


def check_prompt_switches(recipes: dict[str, Recipe], spec) -> None:
    """Refuse, before any work, a prompt schedule for a role whose recipe cannot switch prompts, naming those that can."""
    if not spec.switches:
        return
    for role, recipe in recipes.items():
        if not recipe.supports_prompt_switch:
            able = [n for n in RECIPE_NAMES if recipe_by_name(n).supports_prompt_switch]
            raise ValueError(f"the {role}'s context recipe {recipe.name!r} cannot change the prompt between blocks, "
                             f"but the prompt schedule switches at block {spec.switches[0][0]}: use one prompt, or "
                             f"a recipe that can ({', '.join(able)})")
