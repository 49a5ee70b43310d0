"""ImageReward hosted by ComfyUI: scoring first has ComfyUI load the scorer (and only it)."""
from __future__ import annotations

import torch

import comfy.model_management as mm

from ..sdvg_core.models.reward import ImageRewardScorer
from . import comfy_memory


class HostedScorer:
    """ImageReward under a ModelPatcher; scoring loads it (only it) first."""

    def __init__(self, scorer: ImageRewardScorer, key: str, info: str):
        self.scorer, self.key, self.info = scorer, key, info
        self.patcher = comfy_memory.managed(scorer.model, mm.get_torch_device(), mm.unet_offload_device())

    def score_frames(self, frames: torch.Tensor, prompt: str) -> torch.Tensor:
        comfy_memory.load(self.patcher, force_full_load=True)
        return self.scorer.score_frames(frames, prompt)
