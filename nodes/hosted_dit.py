"""A Wan DiT hosted by ComfyUI: CausalWan whose every call first has ComfyUI load its weights (and only them), and
the SDVG_MODEL value the loader nodes output."""
from __future__ import annotations

from dataclasses import dataclass

import torch

import comfy.model_management as mm

from ..sdvg_core.engine.memory import dit_memory
from ..sdvg_core.models.wan import CausalWan
from ..sdvg_core.models.wan_config import WanDiTConfig
from . import comfy_memory
from .attention import host_attention


class HostedWan(CausalWan):
    """CausalWan whose every model call first asks ComfyUI to load this model (and only this one).

    `work_bytes` is what a call needs beside the weights (KV window, text K/V, activations): sized for Krea at
    832x480 at load time, then for the actual recipe window and size by `Session.reserve` at Start.
    """

    def __init__(self, net: torch.nn.Module, cfg: WanDiTConfig, patcher, *, dtype: torch.dtype, key: str,
                 full_load: bool, work_bytes: int = 0, compile: bool | str = False):
        super().__init__(net, cfg, dtype=dtype, device=patcher.load_device, key=key, attention_fn=host_attention(patcher),
                         compile=compile)
        self.patcher, self.full_load, self.work_bytes = patcher, full_load, work_bytes

    def ensure_loaded(self) -> None:
        comfy_memory.load(self.patcher, memory_required=self.work_bytes, force_full_load=self.full_load)

    def encode_text(self, *args, **kwargs):
        self.ensure_loaded()
        return super().encode_text(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self.ensure_loaded()
        return super().forward(*args, **kwargs)


@dataclass(frozen=True)
class DiTHandle:
    """What a loader node outputs (SDVG_MODEL): the hosted runner and a line saying what was loaded."""

    role: str  # drafter / target
    runner: HostedWan
    info: str
    own_recipe: str | None = None  # the context recipe the model was trained for, when not the pairing's (LongLive)

    @property
    def key(self) -> str:
        return self.runner.key


# The load-time reservation, until Start knows the recipe and size: Krea at 832x480 (1560 tokens per latent frame,
# a 6-frame window of 3-frame blocks, context rebuilt 3 frames at a time; sdvg_core/engine/recipes KreaRecipe).
DEFAULT_TOKENS_PER_FRAME, DEFAULT_WINDOW_FRAMES, DEFAULT_BLOCK_FRAMES, DEFAULT_CONTEXT_FRAMES = 1560, 6, 3, 3


def work_bytes(cfg: WanDiTConfig, dtype: torch.dtype) -> int:
    """Memory a model call needs beside the weights before Start sizes it (sdvg_core.engine.memory.dit_memory)."""
    return dit_memory(cfg, dtype, tokens_per_frame=DEFAULT_TOKENS_PER_FRAME, window_frames=DEFAULT_WINDOW_FRAMES,
                      frames_per_block=DEFAULT_BLOCK_FRAMES, context_frames=DEFAULT_CONTEXT_FRAMES).step


def host_file_dit(net: torch.nn.Module, cfg: WanDiTConfig, dtype: torch.dtype, key: str,
                  compile: bool | str = False) -> HostedWan:
    """Our own WanDiT (plain torch layers) under a ModelPatcher; loaded whole (it cannot be split like comfy ops)."""
    patcher = comfy_memory.managed(net, mm.get_torch_device(), mm.unet_offload_device())
    return HostedWan(net, cfg, patcher, dtype=dtype, key=key, full_load=True, work_bytes=work_bytes(cfg, dtype),
                     compile=compile)
