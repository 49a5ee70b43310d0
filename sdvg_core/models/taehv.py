"""TAEHV: the tiny video autoencoder for Wan 2.1 latents (madebyollin's `taew2_1`, ~11 M parameters), written from
the published facts: a 2D conv net whose only memory across time is each MemBlock's previous input.

Layout and conventions (as for `WanVAE`, so the engine can use either decoder):
- `decode_stream(z, memory, rule=..., interrupt=...) -> (pixels, new memory)`: z is [B, 16, T, h, w] (NCTHW) in the
  normalised space the DiT works in; pixels are [B, 3, T', 8h, 8w] in [-1, 1]: TAEHV's RGB is clamped to [0, 1] and
  mapped with 2x - 1 (so they are clamped, where `WanVAE`'s are not). T' = 4T - 3 for the video's first chunk and
  4T after it (Wan's 1 + 4(T - 1) frame rule). The memory passed in is never modified: a rejected draft's decode
  leaves no trace, restoring a memory is keeping the old object.
- `decode_video` / `encode_video` take and return the reference's own layout (NTCHW, RGB in [0, 1], latents in the
  decoder's own space) for parity with it.

The network (reference madebyollin/taehv, `taehv.py`; key names are those of `taew2_1.pth`):
- decoder: soft clamp tanh(x/3)*3, 3x3 conv + ReLU, then three stages of [3 MemBlocks, nearest x2 upsample,
  TGrow (1x1 conv n -> s*n, the s output groups become s consecutive frames), 3x3 conv to the next width], then
  ReLU and a 3x3 conv to RGB. TGrow strides (1, 2, 2) give 4 raw frames per latent frame; the first 3 raw frames of
  a video are dropped (4T - 3 frames remain).
- encoder: 3x3 conv + ReLU, then three stages of [TPool (stride consecutive frames stacked on channels, 1x1 conv),
  3x3 stride-2 conv, 3 MemBlocks], then a 3x3 conv to the latent channels. Frames are padded at the END with
  copies of the last one to a multiple of 4 (TPool strides 2, 2, 1), giving ceil(T/4) latent frames.
- MemBlock: out = ReLU(conv3(ReLU(conv2(ReLU(conv1(cat[x_t, x_{t-1}]))))) + x_t), where x_{t-1} is the block's own
  input one frame earlier at its frame rate (zeros at a video's first frame). Because the memory is an input, not
  an output, every frame of a layer can be computed at once: the past is the input shifted by one frame.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Literal, Mapping

import torch
from torch import nn

from .state_dict import CheckpointError, key_mismatch
from .vae import WAN21_LATENT_MEAN, WAN21_LATENT_STD

__all__ = ["TAEHVConfig", "TAEHV_PRESETS", "TAEHVMemory", "TAEHV", "MemBlock", "TimePool", "TimeGrow",
           "detect_taehv_config", "TAEHV_RULES", "LatentSpace"]

STAGES = 3  # decoder and encoder stages (reference: three MemBlock groups each)
MEMBLOCKS_PER_STAGE = 3  # reference: three MemBlocks per stage in both halves
LATENT_CLAMP = 3.0  # decoder.0: tanh(x / 3) * 3 (reference `Clamp`)
# The frame accounting and the rules a caller may name. TAEHV has one decode graph: "krea" names Krea's update of the
# full VAE's first temporal upsampler cache, and TAEHV has no such cache (TGrow is a frame-local 1x1 conv), so it
# decodes exactly as "standard". Self-Forcing's demo rule (4 pixel frames from the first latent frame) is refused.
TAEHV_RULES = ("standard", "krea")
# Which latents the decoder's first conv was trained on. "normalised": the DiT's (raw - mean) / std, what taew2_1
# takes (its README: no latent scale or shift; fixture README "Latent space"). "raw": the Wan VAE's own latents, what
# LightX2V's LightTAE files take (LightX2V `need_scaled`, which multiplies by std and adds mean before decoding).
LatentSpace = Literal["normalised", "raw"]
LATENT_SPACES = ("normalised", "raw")
# Latent channels of the other TAEHV families (ComfyUI 0.33 `comfy/taesd/taehv.py`, `comfy/sd.py`), for messages.
OTHER_FAMILIES = {48: "Wan 2.2 (taew2_2 / lighttaew2_2)", 32: "HunyuanVideo 1.5 (lighttaehy1_5)",
                  24: "MiniMax H3 (taeh3)", 128: "LTX-2 (taeltx_2)"}


@dataclass(frozen=True)
class TAEHVConfig:
    """Shape hyper-parameters of a TAEHV; the defaults are taew2_1's (reference `TAEHV(checkpoint_path=None)`)."""

    name: str = "taew2_1"
    z_dim: int = 16  # latent channels (reference: latent_channels)
    image_channels: int = 3
    encoder_width: int = 64  # every encoder layer
    decoder_widths: tuple[int, int, int, int] = (256, 128, 64, 64)  # reference n_f: stage 1, 2, 3 and the last conv
    encoder_time_downscale: tuple[bool, bool, bool] = (True, True, False)  # TPool stride 2 where True
    decoder_time_upscale: tuple[bool, bool, bool] = (False, True, True)  # TGrow stride 2 where True
    decoder_space_upscale: tuple[bool, bool, bool] = (True, True, True)  # nearest x2 where True
    latent_space: LatentSpace = "normalised"
    has_encoder: bool = True  # False for a decoder-only file

    def __post_init__(self) -> None:
        if self.latent_space not in LATENT_SPACES:
            raise ValueError(f"latent_space must be one of {LATENT_SPACES}, got {self.latent_space!r}")
        if len(self.decoder_widths) != STAGES + 1:
            raise ValueError(f"decoder_widths needs {STAGES + 1} widths, got {self.decoder_widths}")

    @classmethod
    def from_widths(cls, widths: Mapping[str, object], **overrides) -> "TAEHVConfig":
        """A taew2_1 layout at other widths, from {"encoder": int, "decoder_n_f": [4 ints]} (the fixture meta's
        `widths` entry, named as in the reference)."""
        return cls(encoder_width=int(widths["encoder"]),  # type: ignore[arg-type]
                   decoder_widths=tuple(int(w) for w in widths["decoder_n_f"]), **overrides)  # type: ignore[union-attr]

    @property
    def temporal_compression(self) -> int:
        """Pixel frames per latent frame after the first (4 for taew2_1)."""
        return 2 ** sum(self.decoder_time_upscale)

    @property
    def frames_to_trim(self) -> int:
        """Raw frames dropped at the start of a video (the first latent frame keeps its last raw frame only)."""
        return self.temporal_compression - 1

    @property
    def encoder_temporal_compression(self) -> int:
        """Pixel frames pooled into one latent frame by the encoder (4 for taew2_1)."""
        return 2 ** sum(self.encoder_time_downscale)

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent along H and W (8 for taew2_1)."""
        return 2 ** sum(self.decoder_space_upscale)

    def pixel_frames(self, latent_frames: int, includes_first: bool = True) -> int:
        """Pixel frames decoded from `latent_frames` (the video's first latent frame gives one): as `WanVAEConfig`."""
        if latent_frames <= 0:
            return 0
        total = self.temporal_compression * latent_frames
        return total - self.frames_to_trim if includes_first else total


TAEHV_PRESETS: dict[str, TAEHVConfig] = {
    "taew2_1": TAEHVConfig(),  # madebyollin/taehv taew2_1.pth: DiT-space latents
    "lighttaew2_1": TAEHVConfig(name="lighttaew2_1", latent_space="raw"),  # LightX2V: same shapes, VAE-space latents
}


@dataclass(frozen=True)
class TAEHVMemory:
    """What the streaming decoder carries from block to block. Immutable by convention: decoding returns a new one.

    inputs: one entry per decoder MemBlock, in network order (9 for taew2_1): that block's input at the last frame
        it saw, [B, C, h_i, w_i] at its own resolution, or None before the video's first frame.
    frames_consumed: latent frames decoded so far (0: the next frame is the video's first, whose raw frames are
        trimmed).
    """

    inputs: tuple[torch.Tensor | None, ...]
    frames_consumed: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the carried inputs (for a memory budget)."""
        return sum(t.numel() * t.element_size() for t in self.inputs if t is not None)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "TAEHVMemory":
        """A copy with every carried input moved/cast (e.g. to offload a committed memory to the CPU)."""
        return replace(self, inputs=tuple(None if t is None else t.to(device=device, dtype=dtype) for t in self.inputs))


# --------------------------------------------------------------------------------------------------------- layers
def conv3x3(n_in: int, n_out: int, stride: int = 1, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, stride=stride, padding=1, bias=bias)


def relu() -> nn.ReLU:
    # In place is safe here: every ReLU of the network follows a conv or a sum, never a tensor kept elsewhere
    # (the carried MemBlock inputs are cloned before anything runs on them).
    return nn.ReLU(inplace=True)


class LatentSoftClamp(nn.Module):
    """decoder.0: squashes latents smoothly into (-3, 3) (reference `Clamp`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / LATENT_CLAMP) * LATENT_CLAMP


class MemBlock(nn.Module):
    """Residual 3-conv block over [this frame, this block's input one frame earlier] (widths equal: no skip conv)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(conv3x3(2 * width, width), relu(), conv3x3(width, width), relu(),
                                  conv3x3(width, width))
        self.act = relu()

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        """x, past: [N, C, H, W] (frame t and frame t-1 of the same video) -> [N, C, H, W]."""
        return self.act(self.conv(torch.cat([x, past], dim=1)) + x)


class TimePool(nn.Module):
    """Encoder: `stride` consecutive frames stacked along channels, then a 1x1 conv back to `width`."""

    def __init__(self, width: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(width * stride, width, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B*n, C, H, W] (n a multiple of stride per video) -> [B*n/stride, C, H, W]."""
        _, c, h, w = x.shape
        return self.conv(x.reshape(-1, self.stride * c, h, w))


class TimeGrow(nn.Module):
    """Decoder: a 1x1 conv to `stride` x `width` channels; output group k becomes sub-frame k, in time order."""

    def __init__(self, width: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(width, width * stride, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B*n, C, H, W] -> [B*n*stride, C, H, W]."""
        _, c, h, w = x.shape
        return self.conv(x).reshape(-1, c, h, w)


def build_decoder(c: TAEHVConfig) -> nn.Sequential:
    """decoder.0 .. decoder.22 of taew2_1, in order (indices are the checkpoint's key names)."""
    w = c.decoder_widths
    layers: list[nn.Module] = [LatentSoftClamp(), conv3x3(c.z_dim, w[0]), relu()]  # [N, w0, h, w]
    for s in range(STAGES):  # stage s runs at width w[s] and ends at w[s + 1]
        layers += [MemBlock(w[s]) for _ in range(MEMBLOCKS_PER_STAGE)]
        layers += [nn.Upsample(scale_factor=2 if c.decoder_space_upscale[s] else 1),  # x2 in space
                   TimeGrow(w[s], 2 if c.decoder_time_upscale[s] else 1),  # x1 or x2 in time
                   conv3x3(w[s], w[s + 1], bias=False)]
    layers += [relu(), conv3x3(w[-1], c.image_channels)]  # [N * 4, 3, 8h, 8w], RGB around [0, 1]
    return nn.Sequential(*layers)


def build_encoder(c: TAEHVConfig) -> nn.Sequential:
    """encoder.0 .. encoder.17 of taew2_1, in order."""
    w = c.encoder_width
    layers: list[nn.Module] = [conv3x3(c.image_channels, w), relu()]  # [N, w, H, W]
    for s in range(STAGES):
        layers += [TimePool(w, 2 if c.encoder_time_downscale[s] else 1),  # /1 or /2 in time
                   conv3x3(w, w, stride=2, bias=False)]  # /2 in space
        layers += [MemBlock(w) for _ in range(MEMBLOCKS_PER_STAGE)]
    layers.append(conv3x3(w, c.z_dim))  # [N / 4, z_dim, H/8, W/8]
    return nn.Sequential(*layers)


def run_layers(layers: nn.Sequential, x: torch.Tensor, batch: int, carried: tuple[torch.Tensor | None, ...],
               interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """Run consecutive frames of `batch` videos through `layers`, all frames of a layer at once.

    x: [batch * n, C, H, W], video-major. carried: per MemBlock (network order) its input at the frame before these
    (None: these frames start the video, the past is zeros). Returns the output frames and each MemBlock's input at
    the last of these frames (fresh tensors: nothing returned aliases `carried` or a view of an activation).
    `interrupt()` (may raise to cancel) runs before every MemBlock.
    """
    carried_out: list[torch.Tensor] = []
    for layer in layers:
        if isinstance(layer, MemBlock):
            if interrupt is not None:
                interrupt()
            _, c, h, w = x.shape
            frames = x.view(batch, -1, c, h, w)  # [B, n, C, H, W]
            before = carried[len(carried_out)]
            first = frames.new_zeros(batch, 1, c, h, w) if before is None else before.unsqueeze(1).to(frames)
            past = torch.cat([first, frames[:, :-1]], dim=1).view(-1, c, h, w)  # input shifted one frame later
            carried_out.append(frames[:, -1].clone())  # [B, C, H, W], owns its bytes
            x = layer(x, past)
        else:
            x = layer(x)
    return x, tuple(carried_out)


def count_memblocks(layers: nn.Sequential) -> int:
    return sum(isinstance(layer, MemBlock) for layer in layers)


# --------------------------------------------------------------------------------------------------------- model
class TAEHV(nn.Module):
    """The tiny autoencoder: `encoder` (optional) and `decoder`, named as in taew2_1.pth."""

    def __init__(self, config: TAEHVConfig | str = "taew2_1", frames_per_pass: int = 1) -> None:
        """`frames_per_pass`: latent frames run through each layer together. 1 (default): memory bounded by one
        latent frame, and the same bits for any chunking of the stream; more: fewer, larger convs (faster on a GPU),
        same values up to float rounding."""
        super().__init__()
        self.config = TAEHV_PRESETS[config] if isinstance(config, str) else config
        if frames_per_pass < 1:
            raise ValueError(f"frames_per_pass must be >= 1, got {frames_per_pass}")
        self.frames_per_pass = frames_per_pass
        self.encoder = build_encoder(self.config) if self.config.has_encoder else None
        self.decoder = build_decoder(self.config)
        self.decoder_slots = count_memblocks(self.decoder)  # 9
        self.key: str | None = None  # stable identity for the engine's memo (weights file + dtype), set by loaders

    # ----------------------------------------------------------------------------------------- loading
    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], config: TAEHVConfig | str | None = None,
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                        **config_overrides) -> "TAEHV":
        """Build from taew2_1-named tensors, strictly; widths come from the shapes unless `config` is given.

        Tensors are copied to `device`/`dtype`. Raises CheckpointError (a ValueError) saying what does not fit;
        `io.checkpoint.load_taehv` reads a file and sets `key`.
        """
        if config is None:
            config = detect_taehv_config(sd, **config_overrides)
        elif isinstance(config, str):
            config = TAEHV_PRESETS[config]
        with torch.device("meta"):
            model = cls(config)
        problem = key_mismatch({k: tuple(v.shape) for k, v in model.state_dict().items()},
                               {k: tuple(v.shape) for k, v in sd.items()})
        if problem:
            raise CheckpointError(f"TAEHV state dict does not fit the taew2_1 layout (encoder width "
                                  f"{config.encoder_width}, decoder widths {list(config.decoder_widths)}): {problem}")
        weights = {k: v.to(device=device, dtype=dtype, copy=True) for k, v in sd.items()}
        model.load_state_dict(weights, strict=True, assign=True)
        return model.eval().requires_grad_(False)

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder[1].weight.dtype

    @property
    def device(self) -> torch.device:
        return self.decoder[1].weight.device

    # ----------------------------------------------------------------------------------------- latent space
    def _stats(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Wan 2.1's (mean, std) as float32 [1, C, 1, 1, 1] (the `WanVAE` constants)."""
        mean = torch.tensor(WAN21_LATENT_MEAN, dtype=torch.float32, device=device).view(1, -1, 1, 1, 1)
        std = torch.tensor(WAN21_LATENT_STD, dtype=torch.float32, device=device).view(1, -1, 1, 1, 1)
        return mean, std

    def to_decoder_space(self, z: torch.Tensor) -> torch.Tensor:
        """DiT-space latents [B, C, T, h, w] -> what this decoder takes (identity for taew2_1)."""
        if self.config.latent_space == "normalised":
            return z
        mean, std = self._stats(z.device)
        return (z.float() * std + mean).to(z.dtype)

    def from_encoder_space(self, z: torch.Tensor) -> torch.Tensor:
        """What this encoder gives [B, C, T, h, w] -> DiT-space latents (identity for taew2_1)."""
        if self.config.latent_space == "normalised":
            return z
        mean, std = self._stats(z.device)
        return ((z.float() - mean) / std).to(z.dtype)

    # ----------------------------------------------------------------------------------------- decode
    def empty_decoder_cache(self, rule: str = "standard") -> TAEHVMemory:
        """The memory before any latent frame (the name and `rule` mirror `WanVAE.empty_decoder_cache`)."""
        check_rule(rule)
        return TAEHVMemory(inputs=(None,) * self.decoder_slots)

    @torch.no_grad()
    def decode_stream(self, z_chunk: torch.Tensor, cache: TAEHVMemory | None = None, rule: str = "standard",
                      interrupt: Callable[[], None] | None = None) -> tuple[torch.Tensor, TAEHVMemory]:
        """Decode the next latent frames, continuing from `cache` (None = start of the video).

        z_chunk: [B, z_dim, T, h, w] DiT-space latents (NCTHW, as `WanVAE.decode_stream`). Returns (pixels
        [B, 3, T', 8h, 8w] in [-1, 1] (TAEHV's clamped [0, 1] RGB times 2 minus 1), new memory); T' = 4T - 3 for the
        video's first chunk, else 4T. `rule`: "standard" or "krea", which decode the same (see TAEHV_RULES).
        Neither `cache` nor any tensor it holds is modified. `interrupt()` (may raise to cancel) runs before every
        pass and every MemBlock; a cancelled call returns nothing and changes nothing.
        """
        check_rule(rule)
        cache = self.empty_decoder_cache(rule) if cache is None else cache
        self._validate_memory(cache, z_chunk)
        z = self.to_decoder_space(z_chunk.to(device=self.device, dtype=torch.float32)).to(self.dtype)
        frames, memory = self._decode(z.transpose(1, 2), cache, interrupt)  # NCTHW -> NTCHW in, [0, 1] NTCHW out
        return (frames * 2 - 1).transpose(1, 2).contiguous(), memory  # [B, 3, T', H, W] in [-1, 1]

    def decode(self, z: torch.Tensor, rule: str = "standard") -> torch.Tensor:
        """Decode a whole DiT-space latent video [B, z_dim, T, h, w] -> [B, 3, 4T - 3, 8h, 8w] in [-1, 1]."""
        pixels, _ = self.decode_stream(z, None, rule)
        return pixels

    @torch.no_grad()
    def decode_video(self, latents: torch.Tensor) -> torch.Tensor:
        """The reference's `decode_video`: latents [B, T, z_dim, h, w] (NTCHW, this decoder's own latent space) ->
        RGB [B, 4T - 3, 3, 8h, 8w] in [0, 1], clamped."""
        if latents.dim() != 5 or latents.shape[2] != self.config.z_dim or latents.shape[1] == 0:
            raise ValueError(f"expected latents [B, T>0, {self.config.z_dim}, h, w] (NTCHW), got {list(latents.shape)}")
        frames, _ = self._decode(latents.to(device=self.device, dtype=self.dtype), self.empty_decoder_cache(), None)
        return frames

    def _decode(self, z: torch.Tensor, memory: TAEHVMemory, interrupt: Callable[[], None] | None
                ) -> tuple[torch.Tensor, TAEHVMemory]:
        """z [B, T, C, h, w] in the decoder's space -> ([B, T', 3, H, W] clamped to [0, 1], memory after it)."""
        b, t = z.shape[:2]
        carried, outs = memory.inputs, []
        for start in range(0, t, self.frames_per_pass):
            if interrupt is not None:
                interrupt()
            x = z[:, start:start + self.frames_per_pass]  # [B, n, C, h, w]
            n = x.shape[1]
            y, carried = run_layers(self.decoder, x.reshape(b * n, *x.shape[2:]), b, carried, interrupt)
            outs.append(y.view(b, -1, *y.shape[1:]))  # [B, n * 4, 3, 8h, 8w] raw frames
        frames = torch.cat(outs, dim=1).clamp_(0, 1)
        if memory.frames_consumed == 0:
            frames = frames[:, self.config.frames_to_trim:]  # the video's first latent frame keeps 1 of its 4 frames
        return frames, TAEHVMemory(inputs=carried, frames_consumed=memory.frames_consumed + t)

    def _validate_memory(self, memory: TAEHVMemory, z_chunk: torch.Tensor) -> None:
        if z_chunk.dim() != 5 or z_chunk.shape[1] != self.config.z_dim or z_chunk.shape[2] == 0:
            raise ValueError(f"expected latents [B, {self.config.z_dim}, T>0, h, w] (NCTHW), got {list(z_chunk.shape)}")
        if not isinstance(memory, TAEHVMemory):
            raise TypeError(f"TAEHV continues a TAEHVMemory, got {type(memory).__name__} (a cache of another decoder?)")
        if len(memory.inputs) != self.decoder_slots:
            raise ValueError(f"TAEHV memory has {len(memory.inputs)} slots, this decoder has {self.decoder_slots}")
        first = memory.inputs[0]  # decoder.3's input: [B, w0, h, w]
        b, _, _, h, w = z_chunk.shape
        if first is not None and (first.shape[0], *first.shape[2:]) != (b, h, w):
            raise ValueError(f"TAEHV memory is for batch/size {[first.shape[0], *first.shape[2:]]}, "
                             f"latents are {[b, h, w]}")

    # ----------------------------------------------------------------------------------------- encode
    @torch.no_grad()
    def encode_video(self, frames: torch.Tensor, interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """The reference's `encode_video`: RGB [B, T, 3, H, W] (NTCHW) in [0, 1] -> latents [B, ceil(T/4), z_dim,
        H/8, W/8] in this encoder's own space. The video is padded at its end with copies of its last frame to a
        multiple of 4; each group of 4 frames runs as one pass, carrying the MemBlock inputs."""
        if self.encoder is None:
            raise ValueError(f"{self.config.name} was loaded without an encoder (a decoder-only file): it cannot encode")
        c, f = self.config, self.config.spatial_compression
        if frames.dim() != 5 or frames.shape[2] != c.image_channels or frames.shape[1] == 0:
            raise ValueError(f"expected frames [B, T>0, {c.image_channels}, H, W] (NTCHW), got {list(frames.shape)}")
        if frames.shape[3] % f or frames.shape[4] % f:
            raise ValueError(f"frame height/width {list(frames.shape[3:])} must be multiples of {f}")
        x = frames.to(device=self.device, dtype=self.dtype)
        group = c.encoder_temporal_compression
        pad = -x.shape[1] % group
        if pad:
            x = torch.cat([x, x[:, -1:].expand(-1, pad, -1, -1, -1)], dim=1)  # [B, 4k, 3, H, W]
        b = x.shape[0]
        carried: tuple[torch.Tensor | None, ...] = (None,) * count_memblocks(self.encoder)
        outs = []
        for start in range(0, x.shape[1], group * self.frames_per_pass):
            if interrupt is not None:
                interrupt()
            part = x[:, start:start + group * self.frames_per_pass]  # [B, 4n, 3, H, W]
            y, carried = run_layers(self.encoder, part.reshape(-1, *part.shape[2:]), b, carried, interrupt)
            outs.append(y.view(b, -1, *y.shape[1:]))  # [B, n, z_dim, H/8, W/8]
        return torch.cat(outs, dim=1)

    def encode(self, video: torch.Tensor, interrupt: Callable[[], None] | None = None) -> torch.Tensor:
        """Pixels [B, 3, T, H, W] in [-1, 1] -> DiT-space latents [B, z_dim, ceil(T/4), H/8, W/8] (as many latent
        frames as `WanVAE.encode` gives, 1 + (T-1)//4, but TAEHV groups frames 0-3, 4-7, ... and pads the end)."""
        latents = self.encode_video(((video + 1) / 2).transpose(1, 2), interrupt)  # NTCHW in [0, 1]
        return self.from_encoder_space(latents.transpose(1, 2))


def check_rule(rule: str) -> None:
    """Refuse a decode rule TAEHV does not follow, naming the ones it does."""
    if rule not in TAEHV_RULES:
        raise ValueError(f"TAEHV decodes with rule 'standard' (or 'krea', which is the same for TAEHV: its TGrow "
                         f"keeps no cache for Krea's rule to change), not {rule!r}")


# --------------------------------------------------------------------------------------------------------- detection
DECODER_PROBE = "decoder.22.bias"  # ComfyUI's test for a TAEHV state dict (comfy/sd.py)


def detect_taehv_config(sd: Mapping[str, torch.Tensor], name: str = "taehv",
                        latent_space: LatentSpace = "normalised") -> TAEHVConfig:
    """The config whose shapes a taew2_1-named state dict has: widths and strides read from the tensors.

    Refuses (CheckpointError) what is not a TAEHV for 16-channel Wan 2.1 latents. Spatial upscaling has no
    weights, so it is taken as taew2_1's (x2 in each stage).
    """
    if DECODER_PROBE not in sd:
        has_wan_vae = "decoder.conv1.weight" in sd or "conv2.weight" in sd
        raise CheckpointError(
            f"not a TAEHV state dict: it has no {DECODER_PROBE}"
            + (" (it is the full Wan 2.1 VAE: load it as the VAE, not as the tiny decoder)" if has_wan_vae else
               f" (first keys: {sorted(sd)[:3]}); expected taew2_1.pth / lighttaew2_1 from madebyollin/taehv or "
               f"lightx2v/Autoencoders"))
    probes = ("decoder.1.weight", "decoder.8.weight", "decoder.14.weight", "decoder.20.weight", "decoder.22.weight")
    missing = [k for k in probes if k not in sd]
    if missing:
        raise CheckpointError(f"TAEHV state dict lacks {missing}: not the taew2_1 layout (decoder.0 .. decoder.22)")
    z_dim = sd["decoder.1.weight"].shape[1]
    if z_dim != TAEHVConfig.z_dim:
        family = OTHER_FAMILIES.get(z_dim, "another model")
        raise CheckpointError(f"this TAEHV decodes {z_dim}-channel latents ({family}); SDVG runs Wan 2.1, whose "
                              f"latents have 16 channels: use taew2_1.pth or lighttaew2_1")
    widths = tuple(sd[k].shape[0] for k in probes[:4])
    grow = tuple(sd[f"decoder.{i}.conv.weight"].shape[0] // sd[f"decoder.{i}.conv.weight"].shape[1] == 2
                 for i in (7, 13, 19) if f"decoder.{i}.conv.weight" in sd)
    has_encoder = any(k.startswith("encoder.") for k in sd)
    pool = tuple(sd[f"encoder.{i}.conv.weight"].shape[1] // sd[f"encoder.{i}.conv.weight"].shape[0] == 2
                 for i in (2, 7, 12) if f"encoder.{i}.conv.weight" in sd)
    fields: dict = {"name": name, "z_dim": z_dim, "image_channels": sd["decoder.22.weight"].shape[0],
                    "decoder_widths": widths, "latent_space": latent_space, "has_encoder": has_encoder}
    if len(grow) == STAGES:
        fields["decoder_time_upscale"] = grow
    if has_encoder and "encoder.0.weight" in sd:
        fields["encoder_width"] = sd["encoder.0.weight"].shape[0]
    if len(pool) == STAGES:
        fields["encoder_time_downscale"] = pool
    return TAEHVConfig(**fields)
