"""Wan 2.1 causal 3D VAE (encoder + decoder) with an explicit, immutable streaming decode cache.

Compression is 4x8x8: T latent frames decode to 1 + 4(T-1) pixel frames, H x W latents to 8H x 8W pixels.
Latents are in the normalised space the DiT works in; un/normalisation with the Wan 2.1 per-channel
mean/std happens inside `decode` / `encode`.

Streaming: `decode_stream(z_chunk, cache)` returns the chunk's pixels and a NEW `DecoderCache`; the old
cache (and every tensor in it) is left untouched, so decoding a draft that is later rejected leaves
nothing behind - the caller simply drops the returned cache. From an empty cache, decoding chunk by
chunk equals one `decode` of the whole latent (both run one latent frame at a time internally).
The encoder streams the same way: `encode_stream(pixels, cache)` takes any number of pixel frames, encodes the
reference's chunks (the video's first frame alone, then 4 frames each) and returns a NEW `EncoderCache` holding
the causal histories and the frames still waiting for their chunk; `encode_chunks` does it over an iterator, so
a long input video is never one tensor. One-shot `encode` is the same call, hence the same bits.

Decode rules (they differ only in the temporal upsamplers, see `vae_layers.RuleSpec`):
- "standard": the Wan reference / Self-Forcing `decode` / ComfyUI VAEDecode.
- "krea": Krea realtime-video's VAE (the one the published SDVG runs).
- "selfforcing_demo": Self-Forcing's real-time demo (zero-filled initial cache; the first latent frame
  gives 4 pixel frames, of which the demo shows the last one onwards).

Parameter names equal those of the public `Wan2.1_VAE.pth` and of ComfyUI's `WanVAE`
(`encoder.*`, `conv1.*`, `conv2.*`, `decoder.*`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .state_dict import CheckpointError, KeyLayout, key_mismatch, normalize_prefix
from .vae_layers import (
    CONV_KERNEL,
    CONV_PADDING,
    RULES,
    AttentionBlock,
    CausalConv3d,
    CausalStep,
    DecodeRule,
    ResidualBlock,
    RMSNorm,
    SpatialDownsample,
    SpatialUpsample,
    TemporalDownsample,
    TemporalUpsample,
    count_history_slots,
    rule_spec,
)

__all__ = [
    "WanVAEConfig", "VAE_PRESETS", "detect_vae_preset", "strip_vae_prefix", "DecoderCache", "EncoderCache", "WanVAE",
    "DecodeRule", "RULES",
]

# The standard Wan 2.1 per-channel latent statistics. Source: Wan-AI/Wan2.1 `wan/modules/vae.py` (WanVAE
# mean/std), repeated verbatim in Self-Forcing, Krea realtime-video and ComfyUI (`latent_formats.Wan21`);
# also stored as `latent_mean` / `latent_std` in the shared wan_vae_tiny fixture.
WAN21_LATENT_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)
WAN21_LATENT_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)

# Keys whose shapes pin the preset: width (encoder.conv1), decoder width x latent channels, latent channels.
PROBE_KEYS = ("encoder.conv1.weight", "decoder.conv1.weight", "conv2.weight")
# A checkpoint wrapped by Self-Forcing (`model.`), some packagers (`vae.`) or a ComfyUI full-model dump
# (`first_stage_model.`, next to the DiT and text encoder, whose keys are dropped) carries one of these prefixes.
VAE_LAYOUT = KeyLayout("Wan 2.1 VAE", PROBE_KEYS, ("first_stage_model.", "vae.", "model."), keep_unprefixed=False)


@dataclass(frozen=True)
class WanVAEConfig:
    """Shape hyper-parameters of the Wan 2.1 VAE (Wan-AI/Wan2.1 `_video_vae` defaults unless noted)."""

    name: str
    dim: int = 96  # base width; the real Wan2.1_VAE.pth uses 96
    z_dim: int = 16  # latent channels
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()
    temporal_downsample: tuple[bool, ...] = (False, True, True)  # the decoder upsamples in reverse order
    image_channels: int = 3
    eps: float = 1e-12  # RMS norm: the reference uses F.normalize's default eps
    latent_mean: tuple[float, ...] = WAN21_LATENT_MEAN
    latent_std: tuple[float, ...] = WAN21_LATENT_STD

    @property
    def temporal_upsample(self) -> tuple[bool, ...]:
        return tuple(reversed(self.temporal_downsample))

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent along H and W (8 for Wan 2.1)."""
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_compression(self) -> int:
        """Pixel frames per latent frame after the first (4 for Wan 2.1)."""
        return 2 ** sum(self.temporal_downsample)

    def pixel_frames(self, latent_frames: int, includes_first: bool = True) -> int:
        """Pixel frames decoded from `latent_frames` (the sequence's first latent frame gives one)."""
        if latent_frames <= 0:
            return 0
        return 1 + self.temporal_compression * (latent_frames - 1) if includes_first \
            else self.temporal_compression * latent_frames


VAE_PRESETS: dict[str, WanVAEConfig] = {
    "wan2.1-vae": WanVAEConfig(name="wan2.1-vae", dim=96),  # Wan2.1_VAE.pth
    "tiny": WanVAEConfig(name="tiny", dim=8),  # the golden-tensor VAE (docs/design.md §6)
}


def _resolve_config(config: WanVAEConfig | str) -> WanVAEConfig:
    if isinstance(config, WanVAEConfig):
        return config
    if config not in VAE_PRESETS:
        raise ValueError(f"unknown VAE preset {config!r}; expected one of {sorted(VAE_PRESETS)}")
    return VAE_PRESETS[config]


def strip_vae_prefix(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The VAE's keys without a `first_stage_model.` / `vae.` / `model.` prefix (state_dict.normalize_prefix)."""
    return normalize_prefix(sd, VAE_LAYOUT)[0]


def _expected_shapes(config: WanVAEConfig) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of a model of this config (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = WanVAE(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def detect_vae_preset(sd: Mapping[str, torch.Tensor]) -> str:
    """Name of the preset whose probe-key shapes match this (prefix-stripped) state dict; CheckpointError if none."""
    sd = strip_vae_prefix(sd)
    seen = {k: tuple(sd[k].shape) for k in PROBE_KEYS if k in sd}
    for name, config in VAE_PRESETS.items():
        expected = _expected_shapes(config)
        if all(seen.get(k) == expected[k] for k in PROBE_KEYS):
            return name
    missing = [k for k in PROBE_KEYS if k not in sd]
    raise CheckpointError(
        "state dict does not look like a Wan 2.1 VAE of a known size: shapes seen "
        + ", ".join(f"{k}={list(s)}" for k, s in seen.items())
        + (f"; missing {missing}" if missing else "")
        + f"; known presets {sorted(VAE_PRESETS)} (e.g. wan2.1-vae: encoder.conv1.weight=[96, 3, 3, 3, 3])")


def _check_keys(sd: Mapping[str, torch.Tensor], expected: Mapping[str, tuple[int, ...]]) -> None:
    """Raise CheckpointError naming missing/unexpected keys (first few + counts) and shape mismatches."""
    problem = key_mismatch(expected, {k: tuple(v.shape) for k, v in sd.items()})
    if problem:
        raise CheckpointError(f"Wan VAE state dict does not match the model: {problem}")

@dataclass(frozen=True)
class DecoderCache:
    """What the streaming decoder remembers between chunks. Immutable: decoding returns a new one.

    histories: one entry per causal conv of the decoder, in network order: the last (<= 2) input frames that
        conv saw, [B, C, <=2, h, w], or None where it has seen nothing (or skipped the first frame).
    frames_consumed: latent frames decoded so far (0 = the next frame is the sequence's first).
    rule: the decode rule these histories were built with; continuing with another rule is refused.
    """

    histories: tuple[torch.Tensor | None, ...]
    frames_consumed: int = 0
    rule: str = "standard"

    @property
    def nbytes(self) -> int:
        """Bytes held by the history tensors (for a memory budget)."""
        return sum(h.numel() * h.element_size() for h in self.histories if h is not None)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "DecoderCache":
        """A copy with every history moved/cast (e.g. to offload a committed cache to CPU)."""
        moved = tuple(None if h is None else h.to(device=device, dtype=dtype) for h in self.histories)
        return replace(self, histories=moved)


@dataclass(frozen=True)
class EncoderCache:
    """What the streaming encoder remembers between calls. Immutable: encoding returns a new one.

    histories: one entry per causal conv of the encoder, in network order: the last (<= 2) input frames that
        conv saw ([B, C, <=2, h, w]; 1 frame for a temporal downsampler), or None where it has seen nothing.
    frames_consumed: pixel frames encoded so far (0 = the next frame is the video's first; then 1 + 4k).
    pending: pixel frames received that do not fill a chunk yet, [B, 3, <4, H, W], or None.
    """

    histories: tuple[torch.Tensor | None, ...]
    frames_consumed: int = 0
    pending: torch.Tensor | None = None

    @property
    def pending_frames(self) -> int:
        """Frames waiting for their chunk (dropped if the video ends here, as the reference drops them)."""
        return 0 if self.pending is None else self.pending.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the history and pending tensors (for a memory budget)."""
        held = [h for h in self.histories if h is not None] + ([self.pending] if self.pending is not None else [])
        return sum(t.numel() * t.element_size() for t in held)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "EncoderCache":
        """A copy with every tensor moved/cast."""
        moved = tuple(None if h is None else h.to(device=device, dtype=dtype) for h in self.histories)
        pending = None if self.pending is None else self.pending.to(device=device, dtype=dtype)
        return replace(self, histories=moved, pending=pending)


class Encoder3d(nn.Module):
    """Pixels [B, 3, T, H, W] -> [B, 2*z_dim, T', H/8, W/8] (mean and log-variance, before `conv1`)."""

    def __init__(self, config: WanVAEConfig) -> None:
        super().__init__()
        c, eps = config, config.eps
        dims = [c.dim * m for m in (1, *c.dim_mult)]  # [96, 96, 192, 384, 384] for the real VAE
        self.conv1 = CausalConv3d(c.image_channels, dims[0], CONV_KERNEL, padding=CONV_PADDING)
        blocks: list[nn.Module] = []
        scale = 1.0
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            for _ in range(c.num_res_blocks):
                blocks.append(ResidualBlock(in_dim, out_dim, eps))
                if scale in c.attn_scales:
                    blocks.append(AttentionBlock(out_dim, eps))
                in_dim = out_dim
            if i != len(c.dim_mult) - 1:
                blocks.append(TemporalDownsample(out_dim) if c.temporal_downsample[i] else SpatialDownsample(out_dim))
                scale /= 2.0
        self.downsamples = nn.Sequential(*blocks)
        self.middle = nn.Sequential(ResidualBlock(dims[-1], dims[-1], eps), AttentionBlock(dims[-1], eps),
                                    ResidualBlock(dims[-1], dims[-1], eps))
        self.head = nn.Sequential(RMSNorm(dims[-1], images=False, eps=eps), nn.SiLU(),
                                  CausalConv3d(dims[-1], 2 * c.z_dim, CONV_KERNEL, padding=CONV_PADDING))

    def forward(self, x: torch.Tensor, step: CausalStep, interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """One chunk (the first frame, or 4 frames) -> its latent frame(s), advancing `step`'s histories.

        `interrupt()` (may raise to cancel) runs before every block, so Cancel lands within one block.
        """
        return _run_causal(self.conv1, (*self.downsamples, *self.middle), self.head, x, step, interrupt)


def _run_causal(conv_in: nn.Module, blocks: tuple[nn.Module, ...], head: nn.Sequential, x: torch.Tensor,
                step: CausalStep, interrupt: Callable[[], None] | None) -> torch.Tensor:
    """conv_in -> blocks -> (norm, SiLU, conv) head, each causal conv carrying `step`'s history; Cancel between blocks."""
    x = step.conv(conv_in, x)
    for block in blocks:
        if interrupt is not None:
            interrupt()
        x = block(x, step)
    norm, act, conv = head
    return step.conv(conv, act(norm(x)))


class Decoder3d(nn.Module):
    """Latents [B, z_dim, T, h, w] (after `conv2`) -> pixels [B, 3, T', 8h, 8w], unclamped."""

    def __init__(self, config: WanVAEConfig) -> None:
        super().__init__()
        c, eps = config, config.eps
        dims = [c.dim * m for m in (c.dim_mult[-1], *reversed(c.dim_mult))]  # [384, 384, 384, 192, 96] real
        self.conv1 = CausalConv3d(c.z_dim, dims[0], CONV_KERNEL, padding=CONV_PADDING)
        self.middle = nn.Sequential(ResidualBlock(dims[0], dims[0], eps), AttentionBlock(dims[0], eps),
                                    ResidualBlock(dims[0], dims[0], eps))
        blocks: list[nn.Module] = []
        scale = 1.0 / 2 ** (len(c.dim_mult) - 2)
        for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
            if i > 0:
                in_dim //= 2  # the upsampler ending the previous stage halved the channels
            for _ in range(c.num_res_blocks + 1):
                blocks.append(ResidualBlock(in_dim, out_dim, eps))
                if scale in c.attn_scales:
                    blocks.append(AttentionBlock(out_dim, eps))
                in_dim = out_dim
            if i != len(c.dim_mult) - 1:
                blocks.append(TemporalUpsample(out_dim) if c.temporal_upsample[i] else SpatialUpsample(out_dim))
                scale *= 2.0
        self.upsamples = nn.Sequential(*blocks)
        self.head = nn.Sequential(RMSNorm(dims[-1], images=False, eps=eps), nn.SiLU(),
                                  CausalConv3d(dims[-1], c.image_channels, CONV_KERNEL, padding=CONV_PADDING))

    def forward(self, x: torch.Tensor, step: CausalStep, interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """One latent frame [B, z_dim, 1, h, w] -> its pixel frames, advancing `step`'s histories.

        `interrupt()` (may raise to cancel) runs before every block, so Cancel lands within one block.
        """
        return _run_causal(self.conv1, (*self.middle, *self.upsamples), self.head, x, step, interrupt)


class WanVAE(nn.Module):
    """The Wan 2.1 VAE: `encoder` + `conv1` (moments) and `conv2` + `decoder`, as in Wan2.1_VAE.pth."""

    def __init__(self, config: WanVAEConfig | str = "wan2.1-vae") -> None:
        super().__init__()
        self.config = _resolve_config(config)
        z = self.config.z_dim
        self.encoder = Encoder3d(self.config)
        self.conv1 = CausalConv3d(2 * z, 2 * z, 1)
        self.conv2 = CausalConv3d(z, z, 1)
        self.decoder = Decoder3d(self.config)
        self.decoder_slots = count_history_slots(self.decoder)  # 32 for Wan 2.1
        self.encoder_slots = count_history_slots(self.encoder)
        self.key: str | None = None  # stable identity for the engine's memo (weights file + dtype), set by loaders

    # ----------------------------------------------------------------------------------------- loading
    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], config: WanVAEConfig | str | None = None,
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> "WanVAE":
        """Build a VAE from a raw / `model.` / `vae.` / `first_stage_model.` state dict, loading strictly.

        The preset is detected from the shapes unless `config` is given. Tensors are copied to
        `device`/`dtype` (the caller's state dict is not aliased). Raises CheckpointError (a ValueError) naming
        missing, unexpected and mis-shaped keys; `io.checkpoint.load_wan_vae` reads a file and sets `key`.
        """
        sd = strip_vae_prefix(sd)
        config = _resolve_config(config) if config is not None else VAE_PRESETS[detect_vae_preset(sd)]
        with torch.device("meta"):
            model = cls(config)
        _check_keys(sd, {k: tuple(v.shape) for k, v in model.state_dict().items()})
        weights = {k: v.to(device=device, dtype=dtype, copy=True) for k, v in sd.items()}
        model.load_state_dict(weights, strict=True, assign=True)
        return model.eval().requires_grad_(False)

    @property
    def dtype(self) -> torch.dtype:
        return self.conv2.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.conv2.weight.device

    def _stats(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, 1/std) as float32 [1, C, 1, 1, 1]; 1/std is the float32 reciprocal, as in the reference."""
        mean = torch.tensor(self.config.latent_mean, dtype=torch.float32, device=device)
        inv_std = 1.0 / torch.tensor(self.config.latent_std, dtype=torch.float32, device=device)
        return mean.view(1, -1, 1, 1, 1), inv_std.view(1, -1, 1, 1, 1)

    # ----------------------------------------------------------------------------------------- decode
    def empty_decoder_cache(self, rule: DecodeRule = "standard") -> DecoderCache:
        """The cache before any latent frame: every history empty."""
        rule_spec(rule)
        return DecoderCache(histories=(None,) * self.decoder_slots, frames_consumed=0, rule=rule)

    @torch.no_grad()
    def decode_stream(self, z_chunk: torch.Tensor, cache: DecoderCache | None = None,
                      rule: DecodeRule = "standard",
                      interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, DecoderCache]:
        """Decode the next latent frames, continuing from `cache` (None = start of the video).

        z_chunk: [B, z_dim, T, h, w], normalised latents. Returns (pixels [B, 3, T', 8h, 8w] unclamped,
        new cache), T' = 4T, or 1 + 4(T-1) for the video's first chunk under the standard/Krea rules.
        Neither `cache` nor any tensor it holds is modified. `interrupt()` (may raise to cancel) runs before
        every latent frame and every decoder block; a cancelled call returns nothing and changes nothing.
        """
        spec = rule_spec(rule)
        cache = self.empty_decoder_cache(rule) if cache is None else cache
        self._validate_cache(cache, z_chunk, rule)
        mean, inv_std = self._stats(z_chunk.device)
        z = z_chunk.to(device=self.device, dtype=torch.float32) / inv_std + mean  # [B, C, T, h, w] raw latents
        z = z.to(self.dtype)
        histories, consumed, frames = cache.histories, cache.frames_consumed, []
        for t in range(z.shape[2]):  # one latent frame at a time: bounded memory, same bits for any chunking
            if interrupt is not None:
                interrupt()
            step = CausalStep(old=histories, first=consumed == 0, rule=spec)
            x = self.conv2(z[:, :, t:t + 1])  # [B, C, 1, h, w], 1x1x1 conv
            frames.append(self.decoder(x, step, interrupt))  # [B, 3, 1 or 4, 8h, 8w]
            histories, consumed = step.finish(), consumed + 1
        return torch.cat(frames, dim=2), DecoderCache(histories=histories, frames_consumed=consumed, rule=rule)

    def decode(self, z: torch.Tensor, rule: DecodeRule = "standard") -> torch.Tensor:
        """Decode a whole latent video [B, z_dim, T, h, w] -> [B, 3, 1 + 4(T-1), 8h, 8w], unclamped."""
        pixels, _ = self.decode_stream(z, None, rule)
        return pixels

    def _validate_cache(self, cache: DecoderCache, z_chunk: torch.Tensor, rule: str) -> None:
        if z_chunk.dim() != 5 or z_chunk.shape[1] != self.config.z_dim or z_chunk.shape[2] == 0:
            raise ValueError(f"expected latents [B, {self.config.z_dim}, T>0, h, w], got {list(z_chunk.shape)}")
        if cache.rule != rule:
            raise ValueError(f"decoder cache was built with rule {cache.rule!r}, cannot continue with {rule!r}")
        if len(cache.histories) != self.decoder_slots:
            raise ValueError(f"decoder cache has {len(cache.histories)} slots, this VAE has {self.decoder_slots}")
        first = cache.histories[0]  # decoder.conv1's input history: [B, z_dim, <=2, h, w]
        b, _, _, h, w = z_chunk.shape
        if first is not None and (first.shape[0], *first.shape[3:]) != (b, h, w):
            raise ValueError(f"decoder cache is for batch/size {[first.shape[0], *first.shape[3:]]}, "
                             f"latents are {[b, h, w]}")

    # ----------------------------------------------------------------------------------------- encode
    def empty_encoder_cache(self) -> EncoderCache:
        """The encoder cache before any pixel frame: every history empty, nothing pending."""
        return EncoderCache(histories=(None,) * self.encoder_slots)

    @torch.no_grad()
    def encode_stream(self, pixels: torch.Tensor, cache: EncoderCache | None = None,
                      interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, EncoderCache]:
        """Encode the next pixel frames, continuing from `cache` (None = start of the video).

        pixels: [B, 3, T, H, W] in [-1, 1], T >= 0. Frames are taken in the reference's chunks: the video's
        first frame alone, then 4 frames at a time; frames that do not fill a chunk yet wait in the returned
        cache's `pending` and are encoded by the next call. Returns (normalised latent means
        [B, z_dim, n, H/8, W/8], n >= 0 chunks completed, new cache). Neither `cache` nor any tensor it holds
        is modified, so one-shot, chunked and frame-by-frame encodes give the same bits. `interrupt()` (may
        raise to cancel) runs before every encoder block of every chunk (the encoder's convention, as for the
        anchor); a cancelled call returns nothing and changes nothing.
        """
        cache = self.empty_encoder_cache() if cache is None else cache
        self._validate_encoder_cache(cache, pixels)
        x = pixels.to(device=self.device, dtype=self.dtype)
        if cache.pending is not None:
            x = torch.cat([cache.pending.to(x), x], dim=2)  # [B, 3, pending + T, H, W]
        histories, consumed, outs = cache.histories, cache.frames_consumed, []
        start = 0
        while True:
            size = 1 if consumed == 0 else self.config.temporal_compression
            if x.shape[2] - start < size:
                break
            step = CausalStep(old=histories, first=consumed == 0)
            chunk = x[:, :, start:start + size]  # [B, 3, 1 or 4, H, W]
            outs.append(self.conv1(self.encoder(chunk, step, interrupt)))  # [B, 2 z_dim, 1, H/8, W/8] moments
            histories, consumed, start = step.finish(), consumed + size, start + size
        rest = x[:, :, start:]
        pending = rest.clone(memory_format=torch.contiguous_format) if rest.shape[2] else None
        new_cache = EncoderCache(histories=histories, frames_consumed=consumed, pending=pending)
        f = self.config.spatial_compression
        if not outs:
            b, _, _, h, w = x.shape
            return x.new_zeros(b, self.config.z_dim, 0, h // f, w // f), new_cache
        mu = torch.cat(outs, dim=2)[:, :self.config.z_dim]  # the second half is the log-variance, unused
        mean, inv_std = self._stats(mu.device)
        return ((mu.float() - mean) * inv_std).to(self.dtype), new_cache

    def encode_chunks(self, chunks: Iterable[torch.Tensor], interrupt: Callable[[], None] | None = None,
                      cache: EncoderCache | None = None) -> Iterator[torch.Tensor]:
        """Encode a video given piece by piece ([B, 3, T_i, H, W] each, any T_i): yields each piece's latents
        [B, z_dim, n_i, h, w] as soon as its chunks complete (pieces that complete none yield nothing). Only one
        piece and the causal histories are alive at a time, so memory does not grow with the video's length."""
        for piece in chunks:
            latents, cache = self.encode_stream(piece, cache, interrupt)
            del piece  # released before the next piece is read: one piece alive at a time
            if latents.shape[2]:
                yield latents

    def encode(self, video: torch.Tensor, interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """Pixels [B, 3, T, H, W] in [-1, 1] -> normalised latent mean [B, z_dim, 1 + (T-1)//4, H/8, W/8].

        As in the reference, the first frame is encoded alone and the rest in chunks of 4 with causal
        histories; trailing frames that do not fill a chunk of 4 are ignored. Same bits as `encode_stream`
        fed the video in any pieces.
        """
        if video.dim() != 5 or video.shape[2] == 0:
            raise ValueError(f"expected video [B, {self.config.image_channels}, T>0, H, W], got {list(video.shape)}")
        return self.encode_stream(video, None, interrupt)[0]

    def _validate_encoder_cache(self, cache: EncoderCache, pixels: torch.Tensor) -> None:
        c = self.config
        f = c.spatial_compression
        if pixels.dim() != 5 or pixels.shape[1] != c.image_channels:
            raise ValueError(f"expected pixels [B, {c.image_channels}, T, H, W], got {list(pixels.shape)}")
        if pixels.shape[3] % f or pixels.shape[4] % f:
            raise ValueError(f"video height/width {list(pixels.shape[3:])} must be multiples of {f}")
        if len(cache.histories) != self.encoder_slots:
            raise ValueError(f"encoder cache has {len(cache.histories)} slots, this VAE has {self.encoder_slots}")
        seen = cache.pending if cache.pending is not None else cache.histories[0]  # encoder.conv1: [B, 3, <=2, H, W]
        b, _, _, h, w = pixels.shape
        if seen is not None and (seen.shape[0], *seen.shape[3:]) != (b, h, w):
            raise ValueError(f"encoder cache is for batch/size {[seen.shape[0], *seen.shape[3:]]}, "
                             f"pixels are {[b, h, w]}")

    def encode_anchor_frame(self, frame: torch.Tensor, target_hw: tuple[int, int],
                            interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """Krea's anchor: one pixel frame [B, 3, H, W] in [-1, 1] -> normalised latent [B, z_dim, 1, h, w].

        The frame is bicubically resized to (target_h//8*8, target_w//8*8) when its size differs (Krea
        resizes to the session size rounded down to the VAE stride), then encoded as a one-frame video.
        """
        f = self.config.spatial_compression
        size = (target_hw[0] // f * f, target_hw[1] // f * f)
        if tuple(frame.shape[-2:]) != size:
            frame = F.interpolate(frame.float(), size=size, mode="bicubic", align_corners=False)
        return self.encode(frame.unsqueeze(2), interrupt)
