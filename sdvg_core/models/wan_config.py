"""Wan 2.1 DiT configurations: presets for the real drafter/target and tiny test models, plus preset detection.

Sizes are the public Wan 2.1 configs (Wan-AI/Wan2.1 `wan/configs/wan_t2v_{1_3B,14B}.py`); Self-Forcing's
`self_forcing_dmd.pt` is the 1.3B shape, Krea's `krea-realtime-video-14b.safetensors` the 14B shape.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import torch


@dataclass(frozen=True)
class WanDiTConfig:
    """Shape hyper-parameters of a Wan 2.1 text-to-video DiT (the block-causal variants share them)."""

    name: str
    dim: int
    ffn_dim: int
    num_heads: int
    num_layers: int
    text_dim: int = 4096  # umT5-XXL hidden size
    text_len: int = 512  # umT5 sequence length used by Wan
    in_dim: int = 16  # latent channels of the Wan 2.1 VAE
    out_dim: int = 16
    freq_dim: int = 256  # sinusoidal timestep embedding width
    patch_size: tuple[int, int, int] = (1, 2, 2)  # (t, h, w)
    eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_max_positions: int = 1024  # rows of Wan's RoPE table per axis
    qk_norm: bool = True
    cross_attn_norm: bool = True

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_pairs(self) -> tuple[int, int, int]:
        """Complex pairs per head for the (t, h, w) axes: Wan splits head_dim as d - 4(d//6), 2(d//6), 2(d//6)."""
        d = self.head_dim
        return ((d - 4 * (d // 6)) // 2, d // 6, d // 6)

    @property
    def patch_volume(self) -> int:
        pt, ph, pw = self.patch_size
        return pt * ph * pw

    def tokens_per_frame(self, latent_h: int, latent_w: int) -> int:
        """Tokens one latent frame becomes after patchify (1560 at 832x480)."""
        _, ph, pw = self.patch_size
        return (latent_h // ph) * (latent_w // pw)

    def num_params(self) -> int:
        """Exact parameter count of this shape (no weights needed)."""
        d, f, pv = self.dim, self.ffn_dim, self.patch_volume
        attn = 4 * (d * d + d) + (2 * d if self.qk_norm else 0)
        block = 2 * attn + f * d + f + d * f + d + 6 * d + (2 * d if self.cross_attn_norm else 0)
        embed = (self.in_dim * pv * d + d) + (self.text_dim * d + d + d * d + d)
        embed += (self.freq_dim * d + d + d * d + d) + (d * 6 * d + 6 * d)
        head = d * self.out_dim * pv + self.out_dim * pv + 2 * d
        return embed + self.num_layers * block + head

    def forward_flops(self, tokens: int, attended_tokens: int, text_tokens: int | None = None) -> float:
        """Approximate FLOPs of one forward over `tokens` new tokens attending to `attended_tokens` keys."""
        d, f = self.dim, self.ffn_dim
        text_tokens = self.text_len if text_tokens is None else text_tokens
        linear = 2 * tokens * (4 * d * d + 2 * d * d + 2 * d * f)  # self qkvo + cross q,o + ffn
        attention = 4 * tokens * d * (attended_tokens + text_tokens)
        return float(self.num_layers * (linear + attention))


# Public Wan 2.1 sizes (Wan-AI/Wan2.1, wan/configs/wan_t2v_1_3B.py and wan_t2v_14B.py).
PRESETS: dict[str, WanDiTConfig] = {
    "wan2.1-t2v-1.3b": WanDiTConfig(name="wan2.1-t2v-1.3b", dim=1536, ffn_dim=8960, num_heads=12, num_layers=30),
    "wan2.1-t2v-14b": WanDiTConfig(name="wan2.1-t2v-14b", dim=5120, ffn_dim=13824, num_heads=40, num_layers=40),
    # The golden fixture model (../shared/fixtures/causal_wan_tiny/meta.json).
    "tiny": WanDiTConfig(name="tiny", dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32),
    # Demo/benchmark pair: same text width and head_dim as "tiny"; the target's forward costs ~7.4x the
    # drafter's, the 1.3B:14B ratio at 832x480 (DESIGN.md §5).
    "tiny-drafter": WanDiTConfig(name="tiny-drafter", dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32),
    "tiny-target": WanDiTConfig(name="tiny-target", dim=128, ffn_dim=384, num_heads=4, num_layers=6, text_dim=32),
}


def get_preset(name: str) -> WanDiTConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown Wan DiT preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def shape_signature(sd: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Read dim, ffn_dim, layers, text/in/out widths from a Wan state dict (unprefixed names)."""
    need = ("patch_embedding.weight", "text_embedding.0.weight", "blocks.0.ffn.0.weight", "head.head.weight")
    missing = [k for k in need if k not in sd]
    if missing:
        raise ValueError(f"not a Wan 2.1 DiT state dict: missing {missing} (first keys: {list(sd)[:5]})")
    pe = sd["patch_embedding.weight"]  # [dim, in_dim, pt, ph, pw]
    layers = {int(k.split(".")[1]) for k in sd if k.startswith("blocks.")}
    return {
        "dim": int(pe.shape[0]),
        "in_dim": int(pe.shape[1]),
        "ffn_dim": int(sd["blocks.0.ffn.0.weight"].shape[0]),
        "text_dim": int(sd["text_embedding.0.weight"].shape[1]),
        "num_layers": len(layers),
        "out_dim": int(sd["head.head.weight"].shape[0]) // int(pe.shape[2] * pe.shape[3] * pe.shape[4]),
    }


def detect_preset(sd: Mapping[str, torch.Tensor], candidates: tuple[str, ...] | None = None) -> WanDiTConfig:
    """The preset whose shapes match the state dict; refuse clearly when none does.

    Head count is not visible in the shapes, so presets with equal shapes resolve to the first listed
    (the fixture "tiny" before "tiny-drafter": both are the same network).
    """
    sig = shape_signature(sd)
    for name in candidates or tuple(PRESETS):
        cfg = PRESETS[name]
        if all(getattr(cfg, k) == v for k, v in sig.items()):
            return cfg
    known = "; ".join(
        f"{n}: dim {c.dim}, ffn {c.ffn_dim}, layers {c.num_layers}, text {c.text_dim}, in {c.in_dim}"
        for n, c in PRESETS.items()
    )
    hint = ""
    if sig["in_dim"] != 16:
        hint = f" (in_dim {sig['in_dim']} suggests an image-to-video or other Wan variant; SDVG needs text-to-video Wan 2.1)"
    raise ValueError(f"no Wan 2.1 preset matches this checkpoint's shapes {sig}{hint}. Known: {known}")


def with_overrides(cfg: WanDiTConfig, **kw) -> WanDiTConfig:
    return replace(cfg, **kw)
