"""Wan 2.1 DiT configurations: presets for the real drafter/target and tiny test models, plus preset detection.

Sizes are the public Wan 2.1 configs (Wan-AI/Wan2.1 `wan/configs/wan_t2v_{1_3B,14B}.py`); Self-Forcing's
`self_forcing_dmd.pt` is the 1.3B shape, Krea's `krea-realtime-video-14b.safetensors` the 14B shape.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable, Mapping

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

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], name: str | None = None) -> "WanDiTConfig":
        """Config from a dict such as a fixture's meta.json `model_config` or a Wan `config.json` (unknown keys ignored)."""
        known = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items() if k in known and k != "name"}
        missing = [k for k in ("dim", "ffn_dim", "num_heads", "num_layers") if k not in kw]
        if missing:
            raise ValueError(f"a Wan DiT config needs {missing}; got keys {sorted(values)}")
        return cls(name=name or str(values.get("name", f"custom-{kw['dim']}x{kw['num_layers']}")), **kw)


# Public Wan 2.1 sizes (Wan-AI/Wan2.1, wan/configs/wan_t2v_1_3B.py and wan_t2v_14B.py).
PRESETS: dict[str, WanDiTConfig] = {
    "wan2.1-t2v-1.3b": WanDiTConfig(name="wan2.1-t2v-1.3b", dim=1536, ffn_dim=8960, num_heads=12, num_layers=30),
    "wan2.1-t2v-14b": WanDiTConfig(name="wan2.1-t2v-14b", dim=5120, ffn_dim=13824, num_heads=40, num_layers=40),
    # The golden-tensor model (docs/design.md §6).
    "tiny": WanDiTConfig(name="tiny", dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32),
    # Demo/benchmark pair: same text width and head_dim as "tiny"; the target's forward costs ~7.4x the
    # drafter's, the 1.3B:14B ratio at 832x480 (docs/design.md §5).
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
    raise ValueError(f"no Wan 2.1 preset matches this checkpoint's shapes {sig}. Known: {known}. For another Wan 2.1 "
                     f"text-to-video size pass an explicit WanDiTConfig (config=...)")


# ---------------------------------------------------------------------------------------------------------------
# Refusing other Wan models: SDVG runs only Wan 2.1 text-to-video DiTs (their block-causal fine-tunes included).
# ---------------------------------------------------------------------------------------------------------------
# Parameter groups of a Wan 2.1 T2V DiT (Wan-AI/Wan2.1 wan/modules/model.py WanModel with model_type 't2v').
T2V_TOP_LEVEL = ("patch_embedding", "text_embedding", "time_embedding", "time_projection", "blocks", "head")
# Latent channels in and out of a Wan 2.1 T2V DiT (the Wan 2.1 VAE's z_dim).
T2V_LATENT_CHANNELS = 16
# Parameter names only other Wan models have, and what they reveal (Wan-AI/Wan2.1 and Wan2.2 model code, ComfyUI
# comfy/ldm/wan/model.py). Image conditioning adds `img_emb` and `cross_attn.k_img`; VACE adds `vace_*`.
VARIANT_MARKERS: tuple[tuple[str, str], ...] = (
    ("vace_", "a VACE model (Wan 2.1 VACE, video/reference conditioning)"),
    ("img_emb.", "an image-to-video or first-last-frame model (Wan 2.1 I2V / FLF2V, CLIP image conditioning)"),
    ("cross_attn.k_img.", "an image-to-video or first-last-frame model (Wan 2.1 I2V / FLF2V, CLIP image conditioning)"),
    ("control_adapter.", "a camera-control model (Wan Fun Camera)"),
    ("ref_conv.", "a reference-image model (Wan Fun with reference input)"),
    ("casual_audio_encoder.", "a speech-to-video model (Wan 2.2 S2V)"),
    ("audio_injector.", "an audio-driven model (Wan 2.2 S2V or similar)"),
)
# Input widths (latent + conditioning channels) of Wan models that are not text-to-video.
IN_DIM_VARIANTS: dict[int, str] = {
    32: "a camera-control model (Wan 2.1 Fun Camera: 32 input channels)",
    36: "an image-to-video model (36 input channels = 16 latent + 4 mask + 16 image: Wan 2.1 I2V / FLF2V, "
        "Wan 2.2 I2V-A14B, Wan Fun InP)",
    48: "a Wan 2.2 TI2V-5B or Wan 2.1 Fun Control model (48 input channels)",
}
# ComfyUI model_config classes (comfy/supported_models.py) that hold a plain Wan 2.1 T2V network.
COMFY_T2V_CONFIGS = ("WAN21_T2V", "WAN21_CausalAR_T2V")
# Model types of Wan networks that SDVG can run (ComfyUI unet_config["model_type"], WanModel.model_type).
T2V_MODEL_TYPES = ("t2v",)
SDVG_NEEDS = ("SDVG needs a Wan 2.1 text-to-video DiT (16 latent channels in and out, no image/video conditioning), "
              "e.g. Self-Forcing's 1.3B drafter or Krea Realtime Video 14B")
# What the checks cannot see: a Wan 2.2 T2V-A14B expert has exactly the shapes and names of Wan 2.1 T2V-14B.
INDISTINGUISHABLE_NOTE = ("Note: Wan 2.2 T2V-A14B experts have the same parameter names and shapes as Wan 2.1 T2V 14B "
                          "and cannot be told apart from the file; do not use them as the target.")


class WrongWanModel(ValueError):
    """A network or checkpoint is a Wan model SDVG cannot run (image-to-video, VACE, Wan 2.2 5B...)."""


def t2v_problem(keys: Iterable[str], in_dim: int | None, out_dim: int | None, *, model_type: str | None = None,
                config_class: str | None = None) -> str | None:
    """What makes this network something other than a Wan 2.1 T2V DiT (None when nothing does)."""
    keys = list(keys)
    for marker, what in VARIANT_MARKERS:
        hits = [k for k in keys if k.startswith(marker) or f".{marker}" in k]
        if hits:
            return f"{what}: it has {key_count(hits)}"
    if in_dim is not None and in_dim != T2V_LATENT_CHANNELS:
        return IN_DIM_VARIANTS.get(in_dim, f"a model with {in_dim} input channels")
    if out_dim is not None and out_dim != T2V_LATENT_CHANNELS:
        return f"a model predicting {out_dim}-channel latents (Wan 2.2 TI2V-5B uses the 48-channel Wan 2.2 VAE)"
    if config_class and config_class.upper().startswith("WAN") and config_class not in COMFY_T2V_CONFIGS:
        return f"ComfyUI model type {config_class} (SDVG accepts {' / '.join(COMFY_T2V_CONFIGS)})"
    if model_type is not None and model_type not in T2V_MODEL_TYPES:
        return f"a Wan '{model_type}' model"
    extra = sorted({k.split(".")[0] for k in keys} - set(T2V_TOP_LEVEL))
    if extra:
        return f"a Wan variant with extra parts {extra} that a text-to-video DiT does not have"
    return None


def key_count(keys: list[str]) -> str:
    """'N keys such as first' for messages."""
    return f"{len(keys)} key{'s' if len(keys) != 1 else ''} such as {sorted(keys)[0]!r}"


def check_t2v(keys: Iterable[str], in_dim: int | None, out_dim: int | None, what: str, *,
              model_type: str | None = None, config_class: str | None = None) -> None:
    """Raise WrongWanModel naming what `what` is and what SDVG needs, unless it is a Wan 2.1 T2V DiT."""
    problem = t2v_problem(keys, in_dim, out_dim, model_type=model_type, config_class=config_class)
    if problem:
        raise WrongWanModel(f"{what} is {problem}. {SDVG_NEEDS}; SDVG would ignore its extra inputs, so it is refused.")


def check_t2v_state_dict(sd: Mapping[str, torch.Tensor], what: str) -> None:
    """check_t2v on an unprefixed state dict: names, and input/output widths from the patch embedding and head.

    A state dict that is not Wan-like at all (no patch embedding or blocks) passes: shape_signature reports it.
    """
    pe = sd.get("patch_embedding.weight")  # [dim, in_dim, pt, ph, pw]
    if pe is None or not any(k.startswith("blocks.") for k in sd):
        return
    head = sd.get("head.head.weight")  # [out_dim * pt * ph * pw, dim]
    in_dim = int(pe.shape[1]) if pe is not None and pe.ndim == 5 else None
    out_dim = int(head.shape[0]) // int(pe[0, 0].numel()) if head is not None and in_dim else None
    check_t2v(sd.keys(), in_dim, out_dim, what)
