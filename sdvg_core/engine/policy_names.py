"""The one grammar of routing policies: every front end (the command line, the nodes, the evaluation, the benchmarks)
names a policy with it, and `policy_by_name` turns a name into the Policy object, parsed and validated here only.

    sdvg                  SDVG at the default tau          sdvg:tau=-0.7      SDVG at tau -0.7 (min over frames)
    sdvg-mean:tau=-0.7    the mean-over-frames ablation    target-only        the 14B makes every block
    draft-only            keep every draft                 accept-all         block 0 from the target, keep the rest
    random:p=0.73         accept a draft at random          stride:k=2         StrideAR: the target every k-th block

A value may also follow the colon bare (`sdvg:-0.7`, `random:0.73`, `stride:2`): the evaluation's first spelling.
Names saved by older workflows (`stride_k2`, `target_only`, ...) are read through one table, `LEGACY_POLICY_NAMES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .policy import (DEFAULT_STRIDE_K, DEFAULT_TAU, DraftOnly, Policy, RandomPolicy, StridePolicy, TargetOnly,
                     ThresholdPolicy)

# The kinds and the one parameter each takes (None: none). The parameter's default is used when a name leaves it out.
POLICY_PARAMS: dict[str, str | None] = {
    "sdvg": "tau", "sdvg-mean": "tau", "target-only": None, "draft-only": None, "accept-all": None,
    "random": "p", "stride": "k",
}
POLICY_KINDS = tuple(POLICY_PARAMS)
# The paper's random-routing ablation accepts at SDVG's own acceptance, ~73% of blocks 1-8 (docs/design.md §1).
DEFAULT_RANDOM_P = 0.73
DEFAULTS: dict[str, float | int] = {"tau": DEFAULT_TAU, "p": DEFAULT_RANDOM_P, "k": DEFAULT_STRIDE_K}
# A tau slider's range: ImageReward's rewards are normalised to mean 0, std 1 over its training pairs (the real model's
# frames score within about +-3); +-5 leaves room on both sides. The nodes' sliders read it from here.
TAU_SLIDER = (-5.0, 5.0)
# Names that saved workflows and scripts of earlier versions hold, and the name each means now.
LEGACY_POLICY_NAMES = {
    "target_only": "target-only", "draft_only": "draft-only", "accept_all": "accept-all",
    "stride_k2": "stride:k=2", "stride_k3": "stride:k=3", "stride_k4": "stride:k=4",
}


class PolicyNameError(ValueError):
    """A policy name that does not parse; the message shows the grammar."""


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy name: its kind and its one parameter (tau, p or k; None for kinds without one)."""

    kind: str
    value: float | int | None = None

    @property
    def param(self) -> str | None:
        """The parameter's name: tau, p or k (None: the kind takes none)."""
        return POLICY_PARAMS[self.kind]

    @property
    def tau(self) -> float | None:
        return float(self.value) if self.param == "tau" else None

    @property
    def name(self) -> str:
        """The canonical spelling, e.g. `sdvg:tau=-0.7`, `stride:k=2`, `target-only`."""
        return self.kind if self.param is None else f"{self.kind}:{self.param}={self.value:g}"

    def policy(self, force_reject_first: bool | None = None, seed: int = 0) -> Policy:
        """The Policy object. `force_reject_first`: block 0 from the target (None: the kind's own rule: yes for sdvg,
        sdvg-mean, random and accept-all, no for draft-only; target-only and stride always make block 0 with the
        target); `seed` seeds `random`."""
        kind, force = self.kind, force_reject_first
        if kind in ("sdvg", "sdvg-mean"):
            return ThresholdPolicy(self.value, "min" if kind == "sdvg" else "mean", True if force is None else force)
        if kind == "target-only":
            return TargetOnly()
        if kind == "draft-only":
            return DraftOnly(force_reject_first=bool(force))
        if kind == "accept-all":
            return DraftOnly(force_reject_first=True if force is None else force)
        if kind == "random":
            return RandomPolicy(self.value, seed=seed, force_reject_first=True if force is None else force)
        return StridePolicy(self.value)


def _grammar() -> str:
    return ", ".join(k if p is None else f"{k}:{p}=..." for k, p in POLICY_PARAMS.items())


def _number(name: str, param: str, text: str) -> float | int:
    try:
        value = int(text) if param == "k" else float(text)
    except ValueError:
        whole = " whole" if param == "k" else ""
        raise PolicyNameError(f"policy {name!r}: {param} must be a{whole} number, got {text!r}") from None
    if param != "k" and math.isnan(value):
        raise PolicyNameError(f"policy {name!r}: {param} is not a number (nan)")
    return value


def parse_policy(name: str, tau: float | None = None, default_tau: float = DEFAULT_TAU) -> PolicySpec:
    """A policy name -> PolicySpec, every rule checked (by building the policy once). `tau`: a tau given apart from
    the name (a slider, `--tau`), for the kinds that take one; a name that also states a different tau is refused.
    `default_tau`: the tau of a name that states none (the tiny demo's models have their own)."""
    text = LEGACY_POLICY_NAMES.get(str(name).strip(), str(name).strip())
    kind, colon, arg = text.partition(":")
    if kind not in POLICY_PARAMS:
        raise PolicyNameError(f"unknown policy {name!r}; use one of {_grammar()} (e.g. sdvg:tau=-0.7, stride:k=2)")
    param = POLICY_PARAMS[kind]
    if param is None:
        if colon:
            raise PolicyNameError(f"policy {name!r}: {kind} takes no parameter")
        return PolicySpec(kind)
    value: float | int | None = None
    if colon:
        key, eq, raw = arg.partition("=")
        if not eq:  # the bare spelling: `sdvg:-0.7`
            key, raw = param, arg
        if key.strip() != param:
            raise PolicyNameError(f"policy {name!r}: {kind} takes {param}=..., e.g. {kind}:{param}={DEFAULTS[param]}")
        value = _number(name, param, raw.strip())
    if param == "tau" and tau is not None:
        if value is not None and float(value) != float(tau):
            raise PolicyNameError(f"policy {name!r} states tau {value:g} and tau {tau:g} is also given: give one")
        value = tau
    default = default_tau if param == "tau" else DEFAULTS[param]
    spec = PolicySpec(kind, default if value is None else value)
    try:
        spec.policy()  # each policy class checks its own parameter (tau a number, p in [0, 1], k >= 1)
    except ValueError as e:
        raise PolicyNameError(f"policy {name!r}: {e}") from None
    return spec


def policy_by_name(name: str, tau: float | None = None, force_reject_first: bool | None = None,
                   seed: int = 0, default_tau: float = DEFAULT_TAU) -> Policy:
    """The Policy a name means (`parse_policy`, then `PolicySpec.policy`)."""
    return parse_policy(name, tau, default_tau).policy(force_reject_first, seed)


def policy_arg(value: str) -> str:
    """argparse `type` for a policy option: the name as given, refused with the grammar's own message if bad."""
    import argparse

    try:
        parse_policy(value)
    except PolicyNameError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def spec_of(policy: Policy) -> PolicySpec | None:
    """The name of a Policy object when the grammar has one (None: a benchmark's FixedPattern, ...)."""
    if isinstance(policy, ThresholdPolicy):
        return PolicySpec("sdvg" if policy.aggregation == "min" else "sdvg-mean", policy.tau)
    if isinstance(policy, TargetOnly):
        return PolicySpec("target-only")
    if isinstance(policy, DraftOnly):
        return PolicySpec("accept-all" if policy.force_reject_first else "draft-only")
    if isinstance(policy, RandomPolicy):
        return PolicySpec("random", policy.accept_rate)
    if isinstance(policy, StridePolicy):
        return PolicySpec("stride", policy.k)
    return None
