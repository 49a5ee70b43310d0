"""How an engine runs (`EngineConfig`), and the one builder of a run's config from the names a front end reads:
the recipes by name with the "auto" rule (a drafter trained for its own recipe runs it), the decode rule, the lazy
work mode."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..io.drafters import drafter_own_recipe
from .recipes import KreaRecipe, Recipe, recipe_by_name

# Derived data kept for re-runs, both tiers together (TieredMemo.split: a quarter for decisions' inputs, the rest for
# caches and pixels). What a generation needs is held outside it, so any size is correct; a bigger one reuses more.
DEFAULT_MEMO_BYTES = 2 << 30
DECODE_RULES = ("standard", "krea")
# Which decoder decodes the committed video: the VAE, or the routing decoder (a tiny one given as the Engine's
# `route_vae`: a fast preview; the recipes' pixels, e.g. Krea's anchor, still come from the VAE)
OUTPUT_DECODERS = ("vae", "route")
ROLES = ("drafter", "target")
DEFAULT_RECIPE = "krea"  # the published SDVG pairing: Krea's recipe for both models
# A role's recipe left to the rule: the drafter runs the recipe its kind was trained for (LongLive: longlive), else the
# run's recipe; the target runs the run's recipe.
AUTO = "auto"


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs. Each model has its own context recipe; `recipe` is both roles' default (the
    published pairing: Krea for both), `drafter_recipe` / `target_recipe` override it per role."""

    recipe: Recipe = field(default_factory=KreaRecipe)
    decode_rule: str = "standard"  # "krea" reproduces the published numbers (Krea's VAE cache rule)
    memo_bytes: int = DEFAULT_MEMO_BYTES  # reuse across runs only: what a run needs is held outside it
    lazy: bool = True  # False: draft forced blocks, score every draft, rebuild the target context every block
    sync_timing: bool = False  # synchronise CUDA around each phase so per-phase seconds are GPU-true (costs speed)
    drafter_recipe: Recipe | None = None  # None: `recipe`
    target_recipe: Recipe | None = None  # None: `recipe`
    # decode each block as it is committed (the output, previews and recipes read its pixels); False where only
    # latents leave the run (ComfyUI's AR sampler, whose VAE Decode comes after): a committed block is then decoded
    # only when a later draft's decode or a recipe needs its pixels or the decoder cache after it
    decode_committed: bool = True
    output_decoder: str = "vae"  # "route": the routing decoder decodes the committed video (a fast preview)

    def __post_init__(self):
        if self.decode_rule not in DECODE_RULES:
            raise ValueError(f"decode_rule must be one of {DECODE_RULES}, got {self.decode_rule!r}")
        if self.output_decoder not in OUTPUT_DECODERS:
            raise ValueError(f"output_decoder must be one of {OUTPUT_DECODERS}, got {self.output_decoder!r}")

    @classmethod
    def for_run(cls, recipe: str | Recipe = DEFAULT_RECIPE, drafter_recipe: str | Recipe | None = AUTO,
                target_recipe: str | Recipe | None = AUTO, drafter_kind: str | None = None,
                decode_rule: str = "standard", **options) -> "EngineConfig":
        """A run's config from recipe names (or recipes): `drafter_recipe` / `target_recipe` AUTO or None follow the
        rule above (`drafter_kind`: the drafter file's kind, None for a run without a drafter file); `options` are the
        other fields (memo_bytes, lazy, decode_committed, ...)."""
        base = _recipe(recipe)
        if drafter_recipe in (None, AUTO):
            own = drafter_own_recipe(drafter_kind) if drafter_kind is not None else None
            drafter_recipe = own or base
        drafter = _recipe(drafter_recipe)
        target = base if target_recipe in (None, AUTO) else _recipe(target_recipe)
        # a role running the run's recipe is left to it (None): the published pairing stays a one-recipe config
        return cls(recipe=base, decode_rule=decode_rule, drafter_recipe=None if drafter == base else drafter,
                   target_recipe=None if target == base else target, **options)

    def recipe_for(self, role: str) -> Recipe:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        own = self.drafter_recipe if role == "drafter" else self.target_recipe
        return own if own is not None else self.recipe

    @property
    def num_renoise(self) -> int:
        """Re-noising draws per block: enough for the longer plan, so both roles share the same prefix."""
        return max(self.recipe_for(r).plan.num_renoise for r in ROLES)


def _recipe(value: str | Recipe) -> Recipe:
    return recipe_by_name(value) if isinstance(value, str) else value
