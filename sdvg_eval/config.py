"""Sweep configurations (`sdvg:-0.7`, `target-only`, ...) and the harness's constants, each with its source."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sdvg_core.engine.policy import Policy
from sdvg_core.engine.policy_names import PolicySpec, parse_policy

# The paper's baselines and tau values (docs/design.md §1): target-only, draft-only, block 0 from the target
# + accept the rest, random routing at SDVG's ~73% acceptance, SDVG at tau -0.7 / -1.5, mean-over-frames.
PAPER_CONFIGS = ("target-only", "draft-only", "accept-all", "random:0.73", "sdvg:-0.7", "sdvg:-1.5", "sdvg-mean:-0.7")
BASELINE_KINDS = ("target-only", "draft-only", "accept-all", "random")
CURVE_KINDS = ("sdvg", "sdvg-mean")  # one curve per kind, one point per tau
# StrideAR (published as SpecAR): the target makes every k-th block, block 0 included, the drafter the rest, no scorer.
# Its own series on the Pareto plot (one point per k), compared with SDVG's tau curve at equal counted cost.
STRIDE_KIND = "stride"
# A tiny routing decoder (--route-vae): `sdvg:-0.7@route` routes on it (the drafts scored on its frames; the video is
# the VAE's), a curve of its own on the Pareto plot; `sdvg:-0.7@calibrate` routes on the VAE at that tau and scores
# every draft through the tiny decoder too (the paired scores: calibration.json / calibration.png of the report).
ROUTERS = ("route", "calibrate")
SPEEDUP_BASELINE = "target-only"  # speedups are relative to this config (the paper's convention)
DEFAULT_SEEDS = (42,)  # the paper's seed (docs/design.md §1)
MAX_UNIT_RETRIES = 1  # a unit whose worker died is re-queued this many times before the run gives up on it
RESULTS_FILE = "rows.csv"  # one row per (config, prompt, seed)
UNITS_FILE = "units.csv"  # one row per (prompt, seed) unit: forwards computed vs a naive sweep
RUN_FILE = "run.json"  # the run's fingerprint (models, code, geometry, metrics): rows of another setup are refused
SUMMARY_FILE = "summary.md"
PLOT_FILE = "pareto.png"


@dataclass(frozen=True)
class SweepConfig:
    """One routing configuration of a sweep: its name as given (the rows' label, e.g. `sdvg:-0.7`) and the policy it
    names in the one grammar (sdvg_core.engine.policy_names)."""

    name: str
    spec: PolicySpec
    router: str = ""  # "" (the VAE routes), "route" or "calibrate" (ROUTERS)

    @property
    def series(self) -> str:
        """The plot's series: the kind, `<kind>@route` for a tiny-decoder router, `<kind>@calibrate` (not plotted)."""
        return f"{self.kind}@{self.router}" if self.router else self.kind

    @property
    def kind(self) -> str:
        """target-only | draft-only | accept-all | random | sdvg | sdvg-mean | stride"""
        return self.spec.kind

    @property
    def value(self) -> float | int | None:
        """tau (sdvg, sdvg-mean), the accept rate (random) or k (stride); None for the baselines without one."""
        return self.spec.value

    @property
    def needs_drafter(self) -> bool:
        return self.spec.policy().uses_drafter

    @property
    def needs_scorer(self) -> bool:
        return self.spec.policy().uses_scorer

    def policy(self, prompt_id: int, seed: int) -> Policy:
        """The engine policy; `random` is seeded by (seed, prompt id) so every run of the sweep is reproducible."""
        digest = hashlib.blake2b(f"{seed}:{prompt_id}".encode(), digest_size=8).digest()
        return self.spec.policy(seed=int.from_bytes(digest, "little"))


def parse_config(name: str) -> SweepConfig:
    """A config name in the policy grammar (`target-only`, `sdvg:-0.7` or `sdvg:tau=-0.7`, `random:p=0.73`,
    `stride:k=2`, ...), optionally `@route` / `@calibrate` after it (ROUTERS) -> SweepConfig; the grammar's own message
    for a bad one."""
    policy, _, router = name.partition("@")
    if router and router not in ROUTERS:
        raise ValueError(f"config {name!r}: after '@' comes one of {', '.join(ROUTERS)} (a tiny routing decoder, "
                         f"--route-vae), not {router!r}")
    c = SweepConfig(name, parse_policy(policy), router)
    if router and not c.needs_scorer:
        raise ValueError(f"config {name!r}: @{router} decodes the drafts for ImageReward with the tiny decoder, but "
                         f"{policy!r} scores nothing; use a policy with a tau (sdvg:-0.7@{router})")
    return c


def parse_configs(names: list[str]) -> list[SweepConfig]:
    """Parse and de-duplicate (order kept); target-only first so its measured times are fresh-run times."""
    out: dict[str, SweepConfig] = {}
    for n in names:
        c = parse_config(n)
        out.setdefault(c.name, c)
    return sorted(out.values(), key=lambda c: c.kind != "target-only")
