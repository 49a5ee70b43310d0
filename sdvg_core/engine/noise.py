"""Per-block noise as a pure function of (seed, block): drafter and target share it, re-runs reproduce it.

Every draw is made on the CPU in float32 from a generator seeded only by (seed, block), so the noise of a
block does not depend on what was decided (or computed) for earlier blocks, nor on the device.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Callable

import torch


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
        return block_noise(spec.seed, b, (1, spec.frames_per_block, self.channels, h, w), self.num_renoise)


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
