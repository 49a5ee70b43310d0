"""Few-step flow-matching schedule of Self-Forcing / Krea: shifted sigma table, warped steps, x0 and re-noising.

Conventions (the golden schedule tensors, docs/design.md §6; Self-Forcing `utils/scheduler.py` FlowMatchScheduler with
shift 5, sigma_min 0, extra_one_step): x_t = (1 - sigma) x0 + sigma eps, the model predicts v ~ eps - x0,
so x0 = x_t - sigma v.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import torch

NUM_TRAIN_TIMESTEPS = 1000  # Wan / Self-Forcing training schedule length
DEFAULT_SHIFT = 5.0  # timestep_shift of every Self-Forcing and Krea config
# Self-Forcing self_forcing_dmd.yaml denoising_step_list (warped through the shifted table).
SELF_FORCING_NOMINAL = (1000, 750, 500, 250)


@dataclass(frozen=True)
class FlowMatchSchedule:
    """The 1000-entry shifted flow-matching table and lookups into it."""

    shift: float = DEFAULT_SHIFT
    num_train_timesteps: int = NUM_TRAIN_TIMESTEPS

    @cached_property
    def table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(timesteps[1000], sigmas[1000]) in float32, exactly as the reference builds them."""
        n = self.num_train_timesteps
        s = torch.linspace(1.0, 0.0, n + 1, dtype=torch.float32)[:n]  # extra_one_step: drop the final 0
        sigmas = self.shift * s / (1 + (self.shift - 1) * s)
        return sigmas * n, sigmas

    @property
    def values(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The table as Python floats (the float32 values exactly), read once per (shift, length) per process: the
        lookups below do no tensor work, so a block's loop reads no tensor for its schedule."""
        return _table_values(self.shift, self.num_train_timesteps)

    def warp(self, nominal: tuple[float, ...]) -> tuple[float, ...]:
        """Map nominal steps (1000 = pure noise) onto the shifted table: t = table_t[N - n], with t[N] = 0."""
        t_table, _ = self.values
        return tuple(0.0 if int(n) == 0 else t_table[self.num_train_timesteps - int(n)] for n in nominal)

    def sigma(self, t: float) -> float:
        """sigma of the table entry whose timestep is nearest t (so t = 0 maps to the last entry, ~0.005): the first
        nearest, as argmin over |table - t| in float32 picks it."""
        t_table, sigmas = self.values
        return sigmas[_nearest(t_table, float(t))]


@lru_cache(maxsize=None)
def _table_values(shift: float, n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    t_table, sigmas = FlowMatchSchedule(shift, n).table
    return tuple(t_table.tolist()), tuple(sigmas.tolist())


@lru_cache(maxsize=1024)
def _nearest(table: tuple[float, ...], t: float) -> int:
    """Index of the first entry nearest t, distances taken in float32 as the reference's argmin does."""
    import struct

    def f32(x: float) -> float:
        return struct.unpack("f", struct.pack("f", x))[0]

    tt = f32(t)
    best, best_d = 0, float("inf")
    for i, v in enumerate(table):
        d = abs(f32(v - tt))
        if d < best_d:
            best, best_d = i, d
    return best


@dataclass(frozen=True)
class StepPlan:
    """The timesteps a block is denoised at, and how the block's latents are finalised.

    `commit_clean` is Self-Forcing's extra forward on the final x0 at t = 0 that only writes clean keys and
    values into the KV cache; Krea instead ends with a real 5th call near t = 0 and rebuilds its cache.
    """

    name: str
    timesteps: tuple[float, ...]
    commit_clean: bool
    schedule: FlowMatchSchedule = FlowMatchSchedule()

    @cached_property
    def sigmas(self) -> tuple[float, ...]:
        return tuple(self.schedule.sigma(t) for t in self.timesteps)

    @property
    def num_steps(self) -> int:
        return len(self.timesteps)

    @property
    def num_renoise(self) -> int:
        """Re-noising draws per block: one before every step but the first."""
        return len(self.timesteps) - 1


def self_forcing_plan(schedule: FlowMatchSchedule = FlowMatchSchedule()) -> StepPlan:
    """Self-Forcing DMD: 4 warped steps [1000, 937.5, 833.33, 625] plus a clean commit forward at t = 0."""
    return StepPlan("self_forcing", schedule.warp(SELF_FORCING_NOMINAL), commit_clean=True, schedule=schedule)


def krea_plan(num_steps: int = 5, strength: float = 1.0, schedule: FlowMatchSchedule = FlowMatchSchedule()) -> StepPlan:
    """Krea realtime server: linspace(1000*strength, 0, num_steps) truncated to ints, warped (default 5 calls)."""
    return StepPlan(f"krea_{num_steps}", schedule.warp(_krea_nominal(num_steps, strength)), commit_clean=False,
                    schedule=schedule)


@lru_cache(maxsize=256)
def _krea_nominal(num_steps: int, strength: float) -> tuple[int, ...]:
    """linspace(1000 * strength, 0, num_steps) in float32, truncated: read once per (steps, strength) per process
    (a recipe's plan is made for every block; its steps then come without a tensor read)."""
    return tuple(torch.linspace(NUM_TRAIN_TIMESTEPS * strength, 0, num_steps).to(torch.int64).tolist())


def check_strength(strength: float) -> float:
    """The denoising strength of a video-to-video run, refused outside [0, 1] (1 = from pure noise, 0 = keep)."""
    if not 0.0 <= float(strength) <= 1.0:
        raise ValueError(f"denoising strength must be between 0 and 1, got {strength}: 1 regenerates from pure noise, "
                         f"lower values keep more of the input video")
    return float(strength)


def strength_nominal(strength: float) -> int:
    """The nominal step a strength starts from: 1000 * strength in float32, truncated (Krea v2v.py's first step)."""
    return int(torch.tensor(NUM_TRAIN_TIMESTEPS * check_strength(strength), dtype=torch.float32).to(torch.int64))


def krea_strength_plan(strength: float, num_steps: int = 5, schedule: FlowMatchSchedule = FlowMatchSchedule()
                       ) -> StepPlan:
    """Krea's video-to-video schedule (v2v.py get_denoising_schedule, computed once per session): `krea_plan`'s
    linspace(1000 * strength, 0, num_steps) truncated and warped; named with the strength below 1, and equal to the
    text-to-video plan at 1. 0.7 -> 921.05, 846.77, 729.17, 514.71, 0 (pixels_tiny fixture)."""
    plan = krea_plan(num_steps, check_strength(strength), schedule)
    return plan if strength == 1.0 else replace(plan, name=f"{plan.name}_s{strength:g}")


def self_forcing_strength_plan(strength: float, schedule: FlowMatchSchedule = FlowMatchSchedule()) -> StepPlan:
    """Self-Forcing at a strength (no reference defines it; docs/pixels.md): the few-step model only knows its four
    trained timesteps, so the block starts at the first of them whose nominal step is at most `strength_nominal`
    (never noisier than the strength asks; Krea starts at exactly that step) and keeps the rest and the commit.
    1 -> the text-to-video plan; 0.7 -> 833.33, 625; strengths under the last step (0.25) have no step: refused."""
    start = strength_nominal(strength)
    kept = tuple(n for n in SELF_FORCING_NOMINAL if n <= start)
    if kept == SELF_FORCING_NOMINAL:
        return self_forcing_plan(schedule)
    if not kept:
        lowest = min(SELF_FORCING_NOMINAL) / NUM_TRAIN_TIMESTEPS
        raise ValueError(f"Self-Forcing's few-step model starts only from its trained steps; strength {strength} is "
                         f"below its last one: use a strength of at least {lowest:g} (or the krea recipe)")
    # named by its first step: strengths that keep the same steps are the same plan
    return StepPlan(f"self_forcing_from{kept[0]}", schedule.warp(kept), commit_clean=True, schedule=schedule)


def input_noise_level(plan: StepPlan) -> torch.Tensor:
    """a = t0 / 1000, a float32 scalar (Krea release_server: denoising_step_list[0] / 1000; sigma(t0) in this table,
    0.9210526 at strength 0.7, not the strength itself)."""
    return torch.tensor(plan.timesteps[0], dtype=torch.float32) / NUM_TRAIN_TIMESTEPS


def noise_input(latents: torch.Tensor, eps: torch.Tensor, plan: StepPlan) -> torch.Tensor:
    """Encoded input latents noised to the plan's first step: latents * (1 - a) + eps * a, a = `input_noise_level`,
    in float32 tensor arithmetic as Krea does (its session noise; the first call's input)."""
    a = input_noise_level(plan).to(latents.device)
    return latents * (1.0 - a) + eps.to(latents) * a


def flow_to_x0(x_t: torch.Tensor, flow: torch.Tensor, sigma: float) -> torch.Tensor:
    """x0 = x_t - sigma * v, computed in float64 like the reference and returned in x_t's dtype."""
    return (x_t.double() - sigma * flow.double()).to(x_t.dtype)


def add_noise(x0: torch.Tensor, eps: torch.Tensor, sigma: float) -> torch.Tensor:
    """x = (1 - sigma) x0 + sigma eps, with caller-given eps (drafter and target share it)."""
    return (1 - sigma) * x0 + sigma * eps.to(x0.dtype)


def timestep_tensor(t: float, batch: int, frames: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Per-frame timestep [B, F] in float32, the shape and dtype both references pass to the model. One tensor per
    (value, shape, device), made once and shared (never modify it): a model keeps its sinusoids by tensor, so a
    block's calls neither read a timestep back nor copy one to the device again."""
    return _timestep_tensor(float(t), batch, frames, str(torch.device(device)))


@lru_cache(maxsize=256)
def _timestep_tensor(t: float, batch: int, frames: int, device: str) -> torch.Tensor:
    return torch.full((batch, frames), t, dtype=torch.float32, device=device)
