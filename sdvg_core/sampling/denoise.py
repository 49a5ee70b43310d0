"""One block's denoising loop: a model's calls at a step plan's timesteps, re-noised between steps.

Flow matching (docs/design.md §2): each call predicts the velocity, x0 = x_t - sigma * v, and the next step starts
from x0 re-noised to the next sigma with pre-drawn noise, so drafter and target regenerate a block from the same
draws. The loop starts from whatever noised latents it is given at the plan's first timestep (pure noise at
t = 1000 for a generated block).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..models.wan import CausalWan, KVCache, TextKV
from .timesteps import StepPlan, add_noise, flow_to_x0, timestep_tensor


def denoise(dit: CausalWan, x: torch.Tensor, plan: StepPlan, renoise: torch.Tensor, text: TextKV, kv: KVCache,
            frame_offset: int, *, interrupt: Callable[[], None] | None = None,
            trace: Callable[[str, torch.Tensor], None] = lambda name, t: None,
            after_step: Callable[[int], None] = lambda s: None) -> torch.Tensor:
    """x [1, F, C, h, w] at plan.timesteps[0] -> the last call's x0 (float32). `renoise[s]` re-noises step s's x0 to
    step s+1's sigma; the calls append to `kv` as scratch at RoPE offset `frame_offset`. `trace(name, tensor)` sees
    every step's `step{s}/model_input`, `flow_pred` and `x0_pred`; `after_step(s)` runs after each call."""
    x0 = x
    for s, t in enumerate(plan.timesteps):
        if interrupt is not None:
            interrupt()
        ts = timestep_tensor(t, 1, x.shape[1], dit.device)
        trace(f"step{s}/model_input", x)
        flow = dit.forward(x, ts, text, frame_offset=frame_offset, kv=kv, interrupt=interrupt).flow
        x0 = flow_to_x0(x.float(), flow.float(), plan.sigmas[s])
        trace(f"step{s}/flow_pred", flow)
        trace(f"step{s}/x0_pred", x0)
        if s + 1 < plan.num_steps:
            x = add_noise(x0, renoise[s], plan.sigmas[s + 1])
        after_step(s)
    return x0
