"""ComfyUI-SDVG: speculative decoding for block-autoregressive Wan 2.1 video (ComfyUI custom node pack).

Inside ComfyUI this registers the V3 nodes through `comfy_entrypoint`; anywhere else (tests, the CLI demo) the
import succeeds and defines no nodes. The node layer is imported relatively: ComfyUI has its own `nodes` module.
"""
import importlib.util

# `__package__` is empty when this file is imported as a top-level module (pytest collecting the checkout in an
# environment where ComfyUI is pip-installed): the relative import cannot work there, and no nodes are wanted.
if __package__ and importlib.util.find_spec("comfy_api") is not None:
    from .nodes import comfy_entrypoint  # noqa: F401

    __all__ = ["comfy_entrypoint"]
else:
    __all__ = []
