"""Building blocks of the Wan 2.1 causal 3D VAE, with explicit (functional) causal history.

Every temporal convolution of the Wan VAE is causal: output frame t reads input frames t-2..t. To
process a video a few frames at a time, each such conv needs the last input frames of the previous
call (its "history"). The reference keeps them in a mutable list that the layers overwrite. Here a
per-call `CausalStep` reads the old histories and collects new ones in a fresh list, so the caller's
cache is never written to: decoding a chunk from a cache and dropping the result leaves no trace.

Module and parameter names mirror the public `Wan2.1_VAE.pth` (and ComfyUI's `WanVAE`) so checkpoints
load strictly: e.g. `residual.{0,2,3,6}`, `resample.1`, `time_conv`, `norm.gamma`, `to_qkv`, `proj`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

DecodeRule = Literal["standard", "krea", "selfforcing_demo"]

# Kernel sizes and paddings below are those of the public Wan2.1_VAE.pth tensors (3x3x3 convs, padding 1,
# (3,1,1) temporal resampling convs) and of Wan's `Resample` (right/bottom zero pad before a stride-2 conv).
CONV_KERNEL = 3
CONV_PADDING = 1
TIME_KERNEL = (3, 1, 1)
TIME_STRIDE_DOWN = (2, 1, 1)
DOWNSAMPLE_PAD_LRTB = (0, 1, 0, 1)
SPATIAL_FACTOR = 2  # each spatial resampler halves or doubles H and W
TEMPORAL_UPSAMPLE_FACTOR = 2  # each temporal upsampler doubles the frame count (time_conv gives 2C channels)
DOWNSAMPLE_HISTORY_FRAMES = 1  # the stride-2 temporal downsampler keeps only its last input frame (reference)


@dataclass(frozen=True)
class RuleSpec:
    """How a decode rule treats the temporal upsamplers (the only place the three rules differ).

    first_frame_skips_time_conv: the sequence's first latent frame bypasses time_conv (1 frame out instead
        of 2). True for the reference/ComfyUI decode; False for Self-Forcing's demo, whose zero-filled cache
        makes the first frame go through time_conv like any other (its first latent frame gives 4 pixels).
    masked_repeat_history: Krea's cache update. When a temporal upsampler receives a single frame y_L, the
        history it keeps is [y_L where the previous newest history frame is non-zero else 0, y_L] instead of
        [y_{L-1}, y_L]. Only the first temporal upsampler ever receives single frames.
    """

    first_frame_skips_time_conv: bool
    masked_repeat_history: bool


RULES: dict[str, RuleSpec] = {
    "standard": RuleSpec(first_frame_skips_time_conv=True, masked_repeat_history=False),
    "krea": RuleSpec(first_frame_skips_time_conv=True, masked_repeat_history=True),
    "selfforcing_demo": RuleSpec(first_frame_skips_time_conv=False, masked_repeat_history=False),
}


def rule_spec(rule: str) -> RuleSpec:
    """Look up a decode rule, refusing unknown names with the list of valid ones."""
    if rule not in RULES:
        raise ValueError(f"unknown VAE decode rule {rule!r}; expected one of {sorted(RULES)}")
    return RULES[rule]


def roll_history(history: torch.Tensor | None, x: torch.Tensor, frames: int) -> torch.Tensor:
    """The last `frames` frames of the sequence `history ++ x` (dim 2), as a fresh contiguous tensor.

    Never a view of `history` or `x`, so a cache holding it owns exactly its own bytes.
    """
    t = x.shape[2]
    if t >= frames or history is None:
        return x[:, :, -frames:].clone(memory_format=torch.contiguous_format)
    return torch.cat([history[:, :, t - frames:], x], dim=2)  # [B, C, <=frames, H, W]


def masked_repeat_history(history: torch.Tensor | None, x: torch.Tensor, frames: int) -> torch.Tensor:
    """Krea's update of a temporal upsampler's history (see `RuleSpec.masked_repeat_history`)."""
    if x.shape[2] >= frames:
        return roll_history(history, x, frames)
    if history is None:  # the reference holds zeros here; zeros as the older frame == no older frame
        return x.clone(memory_format=torch.contiguous_format)
    newest = history[:, :, -1:]  # [B, C, 1, H, W]
    older = torch.where(newest == 0, torch.zeros_like(x), x)  # [B, C, 1, H, W]
    return torch.cat([older, x], dim=2)  # [B, C, 2, H, W]


@dataclass
class CausalStep:
    """One forward call over a few frames: reads the previous histories, collects the next ones.

    `old` is never modified; the next histories are appended to `new` in network order, one per slot.
    first: this call starts the sequence (the reference's "first chunk": temporal resamplers special-case it).
    """

    old: tuple[torch.Tensor | None, ...]
    first: bool
    rule: RuleSpec = RULES["standard"]
    new: list[torch.Tensor | None] = field(default_factory=list)

    def read(self) -> torch.Tensor | None:
        """History of the next slot (None when that layer has seen nothing yet)."""
        return self.old[len(self.new)]

    def write(self, history: torch.Tensor | None) -> None:
        """Record the next slot's history after this call."""
        self.new.append(history)

    def conv(self, conv: "CausalConv3d", x: torch.Tensor) -> torch.Tensor:
        """Run a causal conv on x with its history slot, and record the slot's next history."""
        history = self.read()
        y = conv(x, history)
        self.write(roll_history(history, x, conv.time_pad))
        return y

    def finish(self) -> tuple[torch.Tensor | None, ...]:
        """The next histories; checks every slot was visited exactly once."""
        if len(self.new) != len(self.old):
            raise RuntimeError(f"causal step visited {len(self.new)} history slots, expected {len(self.old)}")
        return tuple(self.new)


class CausalConv3d(nn.Conv3d):
    """Conv3d padded symmetrically in space and only on the past side in time.

    The past comes from `history` (previous input frames of this conv); frames missing before the start of
    the sequence are zeros. `time_pad` is how many past frames the conv reads (2 for a 3-frame kernel).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int, int],
                 stride: int | tuple[int, int, int] = 1, padding: int | tuple[int, int, int] = 0) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0)
        pt, ph, pw = (padding,) * 3 if isinstance(padding, int) else padding
        self.time_pad = 2 * pt
        self.space_pad = (pw, pw, ph, ph)

    def forward(self, x: torch.Tensor, history: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, Cin, T, H, W], history [B, Cin, <=time_pad, H, W] or None -> [B, Cout, T', H, W]."""
        missing = self.time_pad
        if history is not None and self.time_pad > 0:
            x = torch.cat([history.to(x), x], dim=2)  # [B, Cin, h + T, H, W]
            missing = max(self.time_pad - history.shape[2], 0)
        x = F.pad(x, (*self.space_pad, missing, 0))  # zeros: spatial border and the time before frame 0
        return super().forward(x)


class RMSNorm(nn.Module):
    """Scale each position's channel vector to unit L2 norm, times sqrt(C) and a learned gamma (no bias).

    Computed in float32 (so bf16/fp16 models normalise accurately) and cast back to the input dtype.
    images=True is the 2D variant (gamma [C,1,1]) used by the attention block; otherwise gamma is [C,1,1,1].
    """

    def __init__(self, dim: int, images: bool, eps: float) -> None:
        super().__init__()
        shape = (dim, 1, 1) if images else (dim, 1, 1, 1)
        self.scale = dim ** 0.5
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.normalize(x.float(), dim=1, eps=self.eps) * self.scale * self.gamma.float()
        return y.to(x.dtype)


class NearestUpsample2x(nn.Module):
    """Nearest-neighbour x2 upsampling of [N, C, H, W], computed in float32 like the reference."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x.float(), scale_factor=float(SPATIAL_FACTOR), mode="nearest").to(x.dtype)


class ResidualBlock(nn.Module):
    """norm-SiLU-conv-norm-SiLU-(dropout)-conv plus a (1x1x1 conv) shortcut; both 3x3x3 convs are causal."""

    def __init__(self, in_dim: int, out_dim: int, eps: float) -> None:
        super().__init__()
        # Index layout matches the checkpoint: residual.{0,3} norms, residual.{2,6} convs. Index 5 is the
        # reference's Dropout(0.0), an identity at inference.
        self.residual = nn.Sequential(
            RMSNorm(in_dim, images=False, eps=eps), nn.SiLU(),
            CausalConv3d(in_dim, out_dim, CONV_KERNEL, padding=CONV_PADDING),
            RMSNorm(out_dim, images=False, eps=eps), nn.SiLU(), nn.Identity(),
            CausalConv3d(out_dim, out_dim, CONV_KERNEL, padding=CONV_PADDING))
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else nn.Identity()

    def forward(self, x: torch.Tensor, step: CausalStep) -> torch.Tensor:
        norm1, act1, conv1, norm2, act2, _dropout, conv2 = self.residual
        h = step.conv(conv1, act1(norm1(x)))  # [B, Cout, T, H, W]
        h = step.conv(conv2, act2(norm2(h)))  # [B, Cout, T, H, W]
        return h + self.shortcut(x)


class AttentionBlock(nn.Module):
    """Single-head self-attention over the H*W positions of each frame separately, with a residual add."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.norm = RMSNorm(dim, images=True, eps=eps)
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor, step: CausalStep | None = None) -> torch.Tensor:
        b, c, t, h, w = x.shape
        y = rearrange(x, "b c t h w -> (b t) c h w")
        qkv = self.to_qkv(self.norm(y))  # [(B T), 3C, H, W], channel order q, k, v
        # One contiguous [(B T), 1, HW, 3C] tensor split on its last dim: the reference's memory layout, which
        # keeps SDPA on the same CPU kernel path (bit-closer results).
        qkv = rearrange(qkv, "n c h w -> n 1 (h w) c").contiguous()
        q, k, v = qkv.chunk(3, dim=-1)  # each [(B T), 1, HW, C]
        y = F.scaled_dot_product_attention(q, k, v)  # [(B T), 1, HW, C], scale 1/sqrt(C)
        y = rearrange(y, "n 1 (h w) c -> n c h w", h=h, w=w).contiguous()  # keep the default memory format
        y = self.proj(y)
        return rearrange(y, "(b t) c h w -> b c t h w", t=t) + x


class SpatialUpsample(nn.Module):
    """Nearest x2 then a 3x3 conv that halves the channels ('upsample2d' in the reference)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.resample = nn.Sequential(NearestUpsample2x(), nn.Conv2d(dim, dim // 2, CONV_KERNEL, padding=CONV_PADDING))

    def upsample_space(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, T, H, W] -> [B, C/2, T, 2H, 2W], frame by frame."""
        t = x.shape[2]
        y = self.resample(rearrange(x, "b c t h w -> (b t) c h w"))
        return rearrange(y, "(b t) c h w -> b c t h w", t=t)

    def forward(self, x: torch.Tensor, step: CausalStep) -> torch.Tensor:
        return self.upsample_space(x)


class TemporalUpsample(SpatialUpsample):
    """Causal (3,1,1) time_conv to 2C channels -> twice the frames, then the spatial upsampling ('upsample3d').

    Channels [0, C) of time_conv's output become the earlier of the two output frames, [C, 2C) the later.
    The sequence's first frame skips time_conv under the standard and Krea rules (1 frame out).
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.time_conv = CausalConv3d(dim, dim * TEMPORAL_UPSAMPLE_FACTOR, TIME_KERNEL, padding=(1, 0, 0))

    def forward(self, x: torch.Tensor, step: CausalStep) -> torch.Tensor:
        history = step.read()
        if step.first and step.rule.first_frame_skips_time_conv:
            step.write(history)  # nothing seen yet: the next frame's window starts with zeros
            return self.upsample_space(x)
        y = self.time_conv(x, history)  # [B, 2C, T, H, W]
        update = masked_repeat_history if step.rule.masked_repeat_history else roll_history
        step.write(update(history, x, self.time_conv.time_pad))
        y = rearrange(y, "b (two c) t h w -> b c (t two) h w", two=TEMPORAL_UPSAMPLE_FACTOR)  # [B, C, 2T, H, W]
        return self.upsample_space(y)


class SpatialDownsample(nn.Module):
    """Zero-pad right/bottom by one, then a stride-2 3x3 conv ('downsample2d' in the reference)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.resample = nn.Sequential(nn.ZeroPad2d(DOWNSAMPLE_PAD_LRTB),
                                      nn.Conv2d(dim, dim, CONV_KERNEL, stride=SPATIAL_FACTOR))

    def downsample_space(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, T, H, W] -> [B, C, T, H/2, W/2], frame by frame."""
        t = x.shape[2]
        y = self.resample(rearrange(x, "b c t h w -> (b t) c h w"))
        return rearrange(y, "(b t) c h w -> b c t h w", t=t)

    def forward(self, x: torch.Tensor, step: CausalStep) -> torch.Tensor:
        return self.downsample_space(x)


class TemporalDownsample(SpatialDownsample):
    """Spatial downsampling, then a stride-2 (3,1,1) time_conv over [last frame of previous chunk, chunk].

    The first chunk (one frame) skips time_conv; its frame is kept as the history ('downsample3d').
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.time_conv = CausalConv3d(dim, dim, TIME_KERNEL, stride=TIME_STRIDE_DOWN)

    def forward(self, x: torch.Tensor, step: CausalStep) -> torch.Tensor:
        x = self.downsample_space(x)  # [B, C, T, H/2, W/2]
        history = step.read()
        step.write(roll_history(None, x, DOWNSAMPLE_HISTORY_FRAMES))
        if step.first:
            return x
        if history is None:
            raise RuntimeError("temporal downsampler called on a later chunk without history")
        return self.time_conv(torch.cat([history, x], dim=2))  # [B, C, (T+1-1)//2, H/2, W/2]


def count_history_slots(modules: Sequence[nn.Module] | nn.Module) -> int:
    """Number of causal history slots: one per conv with a temporal kernel (time_conv included)."""
    root = modules if isinstance(modules, nn.Module) else nn.ModuleList(modules)
    return sum(1 for m in root.modules() if isinstance(m, CausalConv3d) and m.kernel_size[0] > 1)
