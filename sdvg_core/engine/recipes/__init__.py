"""Context recipes, one per model role (docs/design.md §2.3): `krea` (the published SDVG pairing), `self_forcing`,
`longlive` (frame sink + sliding window; `longlive_infinity`: its slot-relative RoPE variant).

`recipe_by_name` builds one from its command-line / node name, optionally with its parameters:
`longlive:window=15,sink=3,global_sink=false` (every field of the recipe's dataclass but its name). `REGISTRY` is
the one table of names: the choice lists, the parser and the constructors all come from it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from .base import ContextHost, Recipe
from .krea import KreaRecipe
from .longlive import LongLiveRecipe
from .self_forcing import SelfForcingRecipe

__all__ = ["ContextHost", "Recipe", "KreaRecipe", "SelfForcingRecipe", "LongLiveRecipe", "REGISTRY", "RECIPE_NAMES",
           "recipe_by_name", "recipe_params", "recipe_spec", "recipe_arg", "check_prompt_switches"]

# name -> the recipe it names, with its reference defaults
REGISTRY: dict[str, Callable[[], Recipe]] = {
    "krea": KreaRecipe,
    "self_forcing": SelfForcingRecipe,
    "longlive": LongLiveRecipe,
    "longlive_infinity": lambda: LongLiveRecipe(variant="infinity"),
}
RECIPE_NAMES = tuple(REGISTRY)


def recipe_by_name(name: str) -> Recipe:
    """The recipe called `name` (a dash may stand for an underscore) with its reference defaults, or
    `name:field=value,...` with some set."""
    base, _, params = name.partition(":")
    make = REGISTRY.get(base.replace("-", "_"))
    if make is None:
        raise ValueError(f"unknown context recipe {base!r}; use one of {', '.join(RECIPE_NAMES)}")
    recipe = make()
    return _with_params(recipe, base, params) if params.strip() else recipe


def recipe_params(recipe: Recipe) -> dict[str, object]:
    """The fields `recipe_by_name` accepts after the colon, with the recipe's current values."""
    return {f.name: getattr(recipe, f.name) for f in dataclasses.fields(recipe) if f.name != "name"}


def recipe_spec(recipe: Recipe) -> str:
    """The name `recipe_by_name` reads back as this recipe: its name, and the parameters that differ from that
    name's defaults (`longlive:window=15`)."""
    named = next((name for name, make in REGISTRY.items() if make() == recipe), None)
    if named is not None:  # a registered recipe with its defaults (longlive_infinity, not longlive:variant=...)
        return named
    try:
        default = recipe_by_name(recipe.name)
    except ValueError:
        return recipe.name
    if not dataclasses.is_dataclass(recipe) or type(default) is not type(recipe):
        return recipe.name
    changed = {k: v for k, v in recipe_params(recipe).items() if getattr(default, k) != v}
    if not changed:
        return recipe.name
    text = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changed.items())
    return f"{recipe.name}:{text}"


def _with_params(recipe: Recipe, base: str, params: str) -> Recipe:
    known = recipe_params(recipe)
    values: dict[str, object] = {}
    for item in params.split(","):
        key, eq, raw = (x.strip() for x in item.partition("="))
        if not eq or not key or not raw:
            raise ValueError(f"recipe parameter {item.strip()!r} of {base!r} is not field=value "
                             f"(e.g. {base}:{next(iter(known), 'field')}=...)")
        if key not in known:
            raise ValueError(f"context recipe {base!r} has no parameter {key!r}; it has "
                             f"{', '.join(f'{k} (default {v!r})' for k, v in known.items())}")
        values[key] = _parse_like(known[key], raw, f"{base}:{key}")
    return dataclasses.replace(recipe, **values)


def _parse_like(default: object, raw: str, where: str) -> object:
    """`raw` as the type of the field's default value (bool, int, float or str; an optional size, default None,
    takes an int or `none`)."""
    try:
        if default is None:
            return None if raw.lower() == "none" else int(raw)
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        kind = "int or none" if default is None else type(default).__name__
        raise ValueError(f"{where}={raw!r}: expected {kind}") from None
    return raw


def recipe_arg(value: str) -> str:
    """argparse `type` for a recipe option: the name as given, refused with the recipe's own message if bad."""
    import argparse

    try:
        recipe_by_name(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def check_prompt_switches(recipes: dict[str, Recipe], spec) -> None:
    """Refuse, before any work, a prompt schedule for a role whose recipe cannot switch prompts, naming those that can."""
    if not spec.schedule.switches:
        return
    for role, recipe in recipes.items():
        if not recipe.supports_prompt_switch:
            able = [n for n in RECIPE_NAMES if recipe_by_name(n).supports_prompt_switch]
            raise ValueError(f"the {role}'s context recipe {recipe.name!r} cannot change the prompt between blocks, "
                             f"but the prompt schedule switches at block {spec.schedule.switches[0].first_block}: use one prompt, or "
                             f"a recipe that can ({', '.join(able)})")
