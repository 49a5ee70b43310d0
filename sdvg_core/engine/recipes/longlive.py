"""LongLive's context recipe: a frame sink plus a sliding window over an appended KV cache (docs/design.md §2.3).

NVlabs/LongLive v1.0 (LongLive-1.3B on Wan2.1-T2V-1.3B; wan/modules/causal_model.py, pipeline/causal_inference.py,
pipeline/interactive_causal_inference.py): Self-Forcing's 4 warped steps and clean t = 0 commit, with a cache of
`local_attn_size` latent frames whose first `sink_size` frames (block 0) stay forever. When a block's first call
would overflow the cache, the oldest window frames are evicted (once per block: its later calls and its commit
evict the same ones), so every call attends to the sink and the newest frames, itself included. Cost per block is
flat: the cache is a ring written in place (models/kv_cache.py), nothing grows with the video.

RoPE: the default model stores keys rotated at their absolute frame index (block b at 3b..3b+2; the sink keeps
0..2, so the query-to-sink distance grows; our positions are computed for any index, LongLive's table stops at
1024). The `infinity` variant (causal_model_infinity.py, use_infinite_attention) stores keys un-rotated and rotates
them at every call by slot index 0..n-1, the queries by their slot: length is unbounded.

A prompt switch recaches (interactive pipeline `_recache_after_switch`): one clean t = 0 forward under the new
prompt over the last min(window, generated) latent frames; global_sink keeps the old sink, otherwise the first
recached frames become the sink. The machinery is Self-Forcing's too (append_cache.py): this file names LongLive's
parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..state import GenerationSpec
from .append_cache import AppendCacheRecipe, CacheRule

VARIANTS = ("default", "infinity")  # causal_model.py (absolute RoPE baked into keys) / causal_model_infinity.py


@dataclass(frozen=True)
class LongLiveRecipe(AppendCacheRecipe):
    """LongLive v1.0 inference (NVlabs/LongLive branch v1.0, commit e52d9ef); defaults from its shipped configs."""

    # configs/longlive_inference.yaml model_kwargs: local_attn_size 12 (latent frames, the sink included), sink_size 3
    window: int = 12
    sink: int = 3
    variant: str = "default"  # "infinity": configs/longlive_inference_infinity.yaml use_infinite_attention
    # configs/longlive_interactive_inference.yaml global_sink: true (keep block 0's sink across a prompt switch)
    global_sink: bool = True
    name: str = "longlive"

    def rule(self) -> CacheRule:
        return CacheRule(self.window, self.sink, "slot" if self.variant == "infinity" else "baked", self.global_sink)

    def validate(self, spec: GenerationSpec) -> None:
        F = spec.frames_per_block
        if self.variant not in VARIANTS:
            raise ValueError(f"LongLive variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.window < F:
            raise ValueError(f"LongLive window of {self.window} latent frames is smaller than a block ({F} frames)")
        if not 0 <= self.sink <= self.window:
            raise ValueError(f"LongLive sink of {self.sink} frames must be between 0 and the window ({self.window})")
        if self.window < self.sink + F:
            raise ValueError(f"LongLive window of {self.window} frames cannot hold its sink ({self.sink}) plus a block "
                             f"({F}): use a window of at least {self.sink + F}")
