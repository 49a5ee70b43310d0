"""sdvg_core: speculative decoding for block-autoregressive video diffusion (pure torch, no ComfyUI)."""

__version__ = "0.1.0"
