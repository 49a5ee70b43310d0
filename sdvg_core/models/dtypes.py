"""The dtypes a model can be loaded in, by the name every front end spells them with (`--dtype bf16`, a node's
weight_dtype): the one table."""
from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
