"""sdvg_core: speculative decoding for block-autoregressive video diffusion (pure torch, no ComfyUI).

The public names below are the stable import surface: `from sdvg_core import Engine, ThresholdPolicy, ...`
keeps working when modules move inside the package (docs/design.md, "Public API"). They are resolved lazily,
on first use, so `import sdvg_core` stays cheap (no torch, transformers or PIL until a name is touched).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module (relative to this package) that defines it. One line per name keeps moves reviewable;
# tests/test_public_api.py checks that every name resolves and that nothing else is exported.
_EXPORTS: dict[str, str] = {
    # the engine and its configuration
    "Engine": ".engine.engine",
    "EngineConfig": ".engine.config",
    "Callbacks": ".engine.engine",
    "ProgressEvent": ".engine.engine",
    "Scorer": ".engine.engine",
    "DEFAULT_MEMO_BYTES": ".engine.config",
    "to_image": ".engine.engine",
    # context recipes
    "KreaRecipe": ".engine.recipes",
    "SelfForcingRecipe": ".engine.recipes",
    "LongLiveRecipe": ".engine.recipes",
    "Recipe": ".engine.recipes",
    "recipe_by_name": ".engine.recipes",
    "RECIPE_NAMES": ".engine.recipes",
    # routing policies
    "Policy": ".engine.policy",
    "ThresholdPolicy": ".engine.policy",
    "TargetOnly": ".engine.policy",
    "DraftOnly": ".engine.policy",
    "RandomPolicy": ".engine.policy",
    "FixedPattern": ".engine.policy",
    "StridePolicy": ".engine.policy",
    "aggregate": ".engine.policy",
    "DEFAULT_TAU": ".engine.policy",
    "policy_by_name": ".engine.policy_names",
    "parse_policy": ".engine.policy_names",
    "PolicySpec": ".engine.policy_names",
    "POLICY_KINDS": ".engine.policy_names",
    # what to generate and what was generated
    "GenerationSpec": ".engine.state",
    "PromptConditioning": ".engine.prompts",
    "PromptSchedule": ".engine.prompts",
    "GenerationState": ".engine.state",
    "BlockRecord": ".engine.state",
    "PendingBlock": ".engine.state",
    # given pixels: start image, extension, video-to-video
    "PixelInput": ".given.request",
    "PixelInputError": ".given.errors",
    "PIXEL_MODES": ".given.request",
    # memo (shared between engines / runs) and noise (custom noise sources)
    "Memo": ".derived.memo",
    "TieredMemo": ".derived.memo",
    "BlockNoise": ".engine.noise",
    "block_noise": ".engine.noise",
    "ComfyARNoise": ".engine.noise",
    # report, plot, memory estimate
    "RunReport": ".engine.report",
    "BlockReport": ".engine.report",
    "build_report": ".engine.report",
    "render_report_plot": ".engine.plot",
    "estimate_for_spec": ".engine.memory",
    "MemoryRefused": ".engine.memory",
    # routing on a cheaper decoder: the same drafts scored under two decoders, compared
    "calibrate": ".engine.calibration",
    "Calibration": ".engine.calibration",
    "render_calibration_plot": ".engine.calibration_plot",
    "paired_scores": ".engine.calibration_run",
    "PairedBlock": ".engine.calibration_run",
    # models
    "CausalWan": ".models.wan",
    "WanDiTConfig": ".models.wan_config",
    "WanVAE": ".models.vae",
    "WanVAEConfig": ".models.vae",
    "TAEHV": ".models.taehv",
    "TAEHVConfig": ".models.taehv",
    "TAEHVMemory": ".models.taehv",
    "ImageRewardScorer": ".models.reward",
    "ImageRewardConfig": ".models.reward_config",
    # loaders (local files only; nothing is downloaded)
    "load_wan_dit": ".io.checkpoint",
    "load_wan_vae": ".io.checkpoint",
    "load_taehv": ".io.checkpoint",
    "CheckpointError": ".io.checkpoint",
    "load_scorer": ".io.reward_files",
    "load_model_files": ".io.model_files",
    "ModelSet": ".io.model_files",
    "load_embeddings": ".io.text",
    "save_embeddings": ".io.text",
    "encode_umt5": ".io.text",
    "UMT5Encoder": ".io.text",
    "write_video": ".io.video",
    "VideoWriter": ".io.video",
    "load_drafter": ".io.drafters",
    "DRAFTER_KINDS": ".io.drafters",
    "read_schedule": ".engine.prompt_schedule",
    "parse_schedule": ".engine.prompt_schedule",
    # tiny random models (demo, tests, benchmarks)
    "tiny_models": ".demo.tiny",
    "TinyModels": ".demo.tiny",
    "tiny_taehv": ".demo.tiny_taehv",
}

__all__ = [
    "Engine", "EngineConfig", "Callbacks", "ProgressEvent", "Scorer", "DEFAULT_MEMO_BYTES", "to_image",
    "KreaRecipe", "SelfForcingRecipe", "LongLiveRecipe", "Recipe", "recipe_by_name", "RECIPE_NAMES",
    "Policy", "ThresholdPolicy", "TargetOnly", "DraftOnly", "RandomPolicy", "FixedPattern", "StridePolicy", "aggregate",
    "DEFAULT_TAU", "policy_by_name", "parse_policy", "PolicySpec", "POLICY_KINDS",
    "GenerationSpec", "PromptConditioning", "PromptSchedule", "GenerationState", "BlockRecord", "PendingBlock",
    "PixelInput", "PixelInputError", "PIXEL_MODES",
    "Memo", "TieredMemo", "BlockNoise", "block_noise", "ComfyARNoise",
    "RunReport", "BlockReport", "build_report", "render_report_plot", "estimate_for_spec", "MemoryRefused",
    "calibrate", "Calibration", "render_calibration_plot", "paired_scores", "PairedBlock",
    "CausalWan", "WanDiTConfig", "WanVAE", "WanVAEConfig", "TAEHV", "TAEHVConfig", "TAEHVMemory",
    "ImageRewardScorer", "ImageRewardConfig",
    "load_wan_dit", "load_wan_vae", "load_taehv", "CheckpointError", "load_scorer", "load_model_files", "ModelSet",
    "load_embeddings", "save_embeddings", "encode_umt5", "UMT5Encoder", "write_video", "VideoWriter",
    "load_drafter", "DRAFTER_KINDS", "read_schedule", "parse_schedule",
    "tiny_models", "TinyModels", "tiny_taehv",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562) and cache the name here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sdvg_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static analysers and IDEs see the real definitions
    from .demo.tiny import TinyModels, tiny_models
    from .demo.tiny_taehv import tiny_taehv
    from .engine.config import DEFAULT_MEMO_BYTES, EngineConfig
    from .engine.engine import Callbacks, Engine, ProgressEvent, Scorer, to_image
    from .engine.calibration import Calibration, calibrate
    from .engine.calibration_plot import render_calibration_plot
    from .engine.calibration_run import PairedBlock, paired_scores
    from .derived.memo import Memo, TieredMemo
    from .engine.memory import MemoryRefused, estimate_for_spec
    from .engine.noise import BlockNoise, ComfyARNoise, block_noise
    from .engine.plot import render_report_plot
    from .engine.policy import (DEFAULT_TAU, DraftOnly, FixedPattern, Policy, RandomPolicy, StridePolicy, TargetOnly,
                                ThresholdPolicy, aggregate)
    from .engine.policy_names import POLICY_KINDS, PolicySpec, parse_policy, policy_by_name
    from .engine.recipes import RECIPE_NAMES, KreaRecipe, LongLiveRecipe, Recipe, SelfForcingRecipe, recipe_by_name
    from .engine.report import BlockReport, RunReport, build_report
    from .engine.prompts import PromptConditioning, PromptSchedule
    from .engine.state import BlockRecord, GenerationSpec, GenerationState, PendingBlock
    from .given.request import PIXEL_MODES, PixelInput
    from .given.errors import PixelInputError
    from .io.checkpoint import CheckpointError, load_taehv, load_wan_dit, load_wan_vae
    from .io.model_files import ModelSet, load_model_files
    from .io.reward_files import load_scorer
    from .io.text import UMT5Encoder, encode_umt5, load_embeddings, save_embeddings
    from .io.drafters import DRAFTER_KINDS, load_drafter
    from .engine.prompt_schedule import parse_schedule, read_schedule
    from .io.video import VideoWriter, write_video
    from .models.reward import ImageRewardScorer
    from .models.reward_config import ImageRewardConfig
    from .models.taehv import TAEHV, TAEHVConfig, TAEHVMemory
    from .models.vae import WanVAE, WanVAEConfig
    from .models.wan import CausalWan
    from .models.wan_config import WanDiTConfig
