"""Context recipes, one per model role (docs/design.md §2.3): `krea` (the published SDVG pairing), `self_forcing`.

`recipe_by_name` builds one from its command-line / node name.
"""
from __future__ import annotations

from .base import ContextHost, Recipe
from .krea import KreaRecipe
from .self_forcing import SelfForcingRecipe

__all__ = ["ContextHost", "Recipe", "KreaRecipe", "SelfForcingRecipe", "RECIPE_NAMES", "recipe_by_name"]

RECIPE_NAMES = ("krea", "self_forcing")


def recipe_by_name(name: str) -> Recipe:
    """The recipe called `name` with its reference defaults."""
    if name == "krea":
        return KreaRecipe()
    if name in ("self_forcing", "self-forcing"):
        return SelfForcingRecipe()
    raise ValueError(f"unknown context recipe {name!r}; use one of {', '.join(RECIPE_NAMES)}")
