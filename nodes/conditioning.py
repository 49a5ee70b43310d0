"""Reading ComfyUI CONDITIONING (CLIP Text Encode, SDVG Load Prompt Embeddings) as SDVG's prompt embeddings."""
from __future__ import annotations

import logging
from typing import Any

import torch

from .errors import SDVGError

LOG = logging.getLogger("SDVG")


def conditioning_embeddings(conditioning: Any) -> tuple[torch.Tensor, str]:
    """CONDITIONING [[tensor [1, L, D], {...}], ...] -> (embeddings of the first entry, prompt text if it carries one)."""
    try:
        cond, extra = conditioning[0][0], conditioning[0][1]
    except (TypeError, IndexError, KeyError) as e:
        raise SDVGError("the conditioning input is empty or not ComfyUI CONDITIONING; connect CLIP Text Encode "
                        "(with a 'wan' CLIP loader) or SDVG Load Prompt Embeddings") from e
    if len(conditioning) > 1:
        LOG.warning("SDVG: the conditioning holds %d prompts; only the first is used", len(conditioning))
    if not isinstance(cond, torch.Tensor) or cond.dim() != 3:
        raise SDVGError(f"the conditioning tensor must be [1, L, 4096] umT5 embeddings, got {type(cond).__name__} "
                        f"{list(getattr(cond, 'shape', []))}")
    return cond[:1].float().cpu(), str((extra or {}).get("sdvg_prompt", ""))
