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
           "recipe_by_name"]

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
