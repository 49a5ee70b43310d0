"""Per-block noise as a pure function of (seed, block): drafter and target share it, re-runs reproduce it.

Two sources. `seeded` (the default): every draw is made on the CPU in float32 from a generator seeded only by (seed,
block), so the noise of a block does not depend on what was decided (or computed) for earlier blocks, nor on the
device. `comfy_ar` (`ComfyARNoise`): ComfyUI core's autoregressive sampler's rule (0.33+, docs/comfyui.md), so a run
reproduces core's SamplerARVideo draws: the first step of every block starts from its frames of one whole-video noise
tensor (core's Noise node), and each re-noise is drawn after reseeding with seed + block * 1000 + step, on the device
the latents are on (a CUDA run draws CUDA's numbers, as core does).
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch

from ..given.request import StartImage
from ..derived.digest import tensor_digest


@dataclass(frozen=True)
class BlockNoise:
    """initial [B, F, C, h, w] at t = 1000 and one re-noising draw per later step [S-1, B, F, C, h, w]."""

    initial: torch.Tensor
    renoise: torch.Tensor

    def to(self, device: torch.device | str) -> "BlockNoise":
        return BlockNoise(self.initial.to(device), self.renoise.to(device))


def block_seed(seed: int, block: int) -> int:
    """A 63-bit generator seed for (seed, block), well mixed so nearby seeds give unrelated noise."""
    digest = hashlib.blake2b(f"sdvg-noise:{seed}:{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def block_noise(seed: int, block: int, shape: tuple[int, int, int, int, int], num_renoise: int) -> BlockNoise:
    """Draw the block's starting noise first, then its re-noising tensors, from one seeded CPU generator."""
    gen = torch.Generator(device="cpu").manual_seed(block_seed(seed, block))
    initial = torch.randn(shape, generator=gen, dtype=torch.float32)
    renoise = torch.randn((num_renoise, *shape), generator=gen, dtype=torch.float32)
    return BlockNoise(initial, renoise)


@dataclass(frozen=True)
class NoiseSource:
    """Each block's noise: the host's `fn(spec, b)` when given, else the seeded draw of `block_noise`."""

    fn: Callable[..., BlockNoise] | None
    channels: int  # latent channels (the DiT's in_dim)
    num_renoise: int

    def __call__(self, spec, b: int) -> BlockNoise:
        if self.fn is not None:
            return self.fn(spec, b)
        h, w = spec.latent_hw
        return block_noise(spec.seed, b, (1, spec.block_frames(b), self.channels, h, w), self.num_renoise)


# ComfyUI core's autoregressive loop (comfy/k_diffusion/sampling.py sample_ar_video, 0.33.0): before re-noising
# step i of block b it calls torch.manual_seed(seed + b * COMFY_AR_BLOCK_STRIDE + i).
COMFY_AR_BLOCK_STRIDE = 1000
NOISE_SOURCES = ("seeded", "comfy_ar")  # the CLI's --noise choices


def comfy_ar_seed(seed: int, block: int, step: int) -> int:
    """The seed core's AR loop sets before drawing the re-noise after step `step` of block `block`."""
    return seed + block * COMFY_AR_BLOCK_STRIDE + step


@lru_cache(maxsize=2)
def _video_noise(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Core's Noise node (RandomNoise: comfy/sample.py prepare_noise): one float32 CPU draw over the whole latent
    [B, C, T, h, w] from a generator seeded with `seed`. Cached: every block slices the same tensor."""
    return torch.randn(shape, generator=torch.Generator(device="cpu").manual_seed(seed), dtype=torch.float32)


@dataclass(frozen=True)
class ComfyARNoise:
    """ComfyUI core's AR noise rule as a noise source (`Engine(noise_fn=...)`), with a stable `key` for memo keys.

    `video`: the whole-video noise the sampler was handed ([1, C, T, h, w], core's layout), when a host gives it (the
    SDVG AR sampler: the Noise node's draw, already scaled to the first sigma); None draws core's Noise node rule from
    the spec's seed (the CLI). `first_frame`: latent frames before block 0 (1 after a start image: core's I2V start
    latent takes the video's first frame). Re-noise draws are core's exact calls on `device`: reseed, then one draw of
    the block's shape [1, C, F, h, w]; the engine's layout [1, F, C, h, w] is a view of them."""

    channels: int = 16  # latent channels (Wan 2.1)
    num_renoise: int = 3  # re-noise draws per block (the step plan's steps - 1)
    device: str = "cpu"
    first_frame: int = 0
    video: torch.Tensor | None = field(default=None, repr=False, compare=False)
    video_digest: str = ""  # names `video` in the key (computed when not given)

    def __post_init__(self):
        if self.video is not None and not self.video_digest:
            object.__setattr__(self, "video_digest", tensor_digest(self.video.to(torch.float32)))

    @property
    def key(self) -> str:
        """Identity in memo keys: the rule, the device whose generator draws, the offset and the given noise."""
        given = f"|video:{self.video_digest}" if self.video is not None else ""
        return f"comfy_ar|{torch.device(self.device).type}|first{self.first_frame}{given}"

    def initial(self, spec, b: int) -> torch.Tensor:
        """Block b's first-step input [1, F, C, h, w]: its frames of the whole-video noise (F: the block's own
        length, a short last block's too)."""
        F = spec.block_frames(b)
        video = self.video
        if video is None:
            h, w = spec.latent_hw
            video = _video_noise(int(spec.seed), (1, self.channels, self.first_frame + spec.num_latent_frames, h, w))
        start = self.first_frame + spec.block_start(b)
        if video.shape[2] < start + F:
            raise ValueError(f"the noise covers {video.shape[2]} latent frames; block {b} needs frames "
                             f"[{start}, {start + F})")
        return video[:, :, start:start + F].permute(0, 2, 1, 3, 4).float()

    def renoise(self, spec, b: int) -> torch.Tensor:
        """Block b's re-noise draws [S-1, 1, F, C, h, w]: draw i after torch.manual_seed(seed + b * 1000 + i)."""
        h, w = spec.latent_hw
        shape = (1, self.channels, spec.block_frames(b), h, w)  # core draws randn_like(denoised) [B, C, F, h, w]
        draws = []
        for i in range(self.num_renoise):
            gen = torch.Generator(device=self.device).manual_seed(comfy_ar_seed(int(spec.seed), b, i))
            draw = torch.randn(shape, generator=gen, dtype=torch.float32, device=self.device)  # [1, C, F, h, w]
            draws.append(draw.permute(0, 2, 1, 3, 4))
        return torch.stack(draws)

    def __call__(self, spec, b: int) -> BlockNoise:
        return BlockNoise(self.initial(spec, b).to(self.device), self.renoise(spec, b))


def noise_source(name: str, spec, channels: int, num_renoise: int, device: str = "cpu") -> ComfyARNoise | None:
    """The noise source a name picks (NOISE_SOURCES): None for `seeded` (the engine's default draw), else core's AR
    rule; a start image takes the video's first latent frame there, as core's ARVideoI2V start latent does."""
    if name not in NOISE_SOURCES:
        raise ValueError(f"noise must be one of {NOISE_SOURCES}, got {name!r}")
    if name == "seeded":
        return None
    start = spec.pixels is not None and spec.pixels.kind is StartImage
    return ComfyARNoise(channels=channels, num_renoise=num_renoise, device=str(device), first_frame=1 if start else 0)


def noise_identity(noise_fn, shared_memo: bool) -> str:
    """Identity of a noise source in memo keys: the seeded default, a custom function's `key`, or one private to
    the engine (refused with a memo other engines share: nothing could tell their noises apart)."""
    if noise_fn is None:
        return "seeded"
    key = getattr(noise_fn, "key", None)
    if isinstance(key, str) and key:
        return key
    if shared_memo:
        raise ValueError("a custom noise_fn used with a shared memo needs a stable `key` attribute")
    return f"private-{uuid.uuid4().hex}"  # this engine's own memo: nothing else can see these entries
