"""A test-local reference driver for the pixels_tiny fixture (its PIXELS.md): every run reproduced model call by model
call with the pack's own building blocks (CausalWan over the tiny weights, its KV cache, the schedule, the VAE encoder
and decoder), fed the fixture's stored random draws.

It pins down what the engine must do per recipe and mode (docs/pixels.md): which calls, at which timesteps, at which
RoPE frame positions, into which KV slots, which latents enter the context and which frames are output. Each call is
recorded with those facts so tests/test_pixels_reference.py can compare them with meta.json and the stored tensors.

Runs:
- Self-Forcing pipeline with `initial_latent` (`start_frame`: 1 frame, `independent_first_frame`; `extend`: 3 frames):
  one clean t = 0 prefix call per given group, then the text-to-video blocks shifted by the given frames.
- Krea session (`v2v_s070`, `v2v_s050`: input video encoded once and noised up front; `v2v_stream`: frames pushed
  block by block and encoded with one streaming encoder cache; `krea_start_frame`: an image repeated 9 times seeds
  the context): the per-block cache rebuild recipe with the strength's truncated schedule.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from sdvg_core import CausalWan, WanDiTConfig, WanVAE, WanVAEConfig
from sdvg_core.sampling.timesteps import (FlowMatchSchedule, StepPlan, add_noise, flow_to_x0, krea_strength_plan,
                                       noise_input, self_forcing_plan)
from sdvg_core.given.encode import encode_clip, encode_start_frame, start_frame_repeats
from sdvg_core.given.fit import to_vae_range
from sdvg_core.models.wan import KVCache, WanDiT

SF_RUNS = ("start_frame", "extend")
KREA_RUNS = ("v2v_s070", "v2v_s050", "v2v_stream", "krea_start_frame")
KREA_DECODE_RULE = "krea"  # Krea's VAEDecoderWrapper (README §2.4): the session's streaming decode
KREA_FIRST_BLOCK_DROPPED = 3  # release_server generate_block_internal: block 0 sends its pixel frames from index 3


@dataclass(frozen=True)
class PixelsFixture:
    """The pixels_tiny fixture: meta.json, tensors, and the tiny DiT and VAE it was made with."""

    meta: dict
    T: dict[str, torch.Tensor]
    dit_cfg: WanDiTConfig
    net: WanDiT
    vae: WanVAE
    frames_per_block: int
    tokens_per_frame: int

    @property
    def pixel_hw(self) -> tuple[int, int]:
        s = self.meta["krea_sizes"]
        return s["pixel_h"], s["pixel_w"]


def load_fixture(fixtures_dir: Path) -> PixelsFixture:
    d = fixtures_dir / "pixels_tiny"
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    sizes = meta["sizes"]
    cfg = WanDiTConfig.from_mapping(sizes["dit"], name="pixels_tiny-dit")
    net = WanDiT(cfg).eval()
    weights = load_file(fixtures_dir / "causal_wan_tiny" / "weights.safetensors")
    net.load_state_dict({k.removeprefix("model."): v for k, v in weights.items()}, strict=True)
    v = sizes["vae"]
    vcfg = WanVAEConfig(name="pixels_tiny-vae", dim=v["dim"], z_dim=v["z_dim"], dim_mult=tuple(v["dim_mult"]),
                        num_res_blocks=v["num_res_blocks"], attn_scales=tuple(v["attn_scales"]),
                        temporal_downsample=tuple(v["temperal_downsample"]))  # the reference's spelling
    vae = WanVAE.from_state_dict(load_file(fixtures_dir / "wan_vae_tiny" / "weights.safetensors"), config=vcfg)
    F = meta["self_forcing"]["num_frame_per_block"]
    tpf = cfg.tokens_per_frame(sizes["latent_h"], sizes["latent_w"])
    assert tpf == sizes["tokens_per_frame"]
    return PixelsFixture(meta, load_file(d / "tensors.safetensors"), cfg, net, vae, F, tpf)


# --------------------------------------------------------------------------------------------------- model calls
@dataclass(frozen=True)
class CallRecord:
    """One model call as made: what went in, where it sat, what came out."""

    kind: str  # "prefix" (SF initial latent), "denoise", "commit" (SF clean t = 0), "kv_rebuild" (Krea context)
    block: int  # the generated block it belongs to (prefix calls: -1)
    model_input: torch.Tensor  # [1, F, C, h, w]
    timestep: torch.Tensor  # [1, F] float32 as passed (the references pass int64 zeros for prefix/rebuild calls)
    rope_frames: tuple[int, ...]
    kv_written: tuple[int, int]  # token slots [start, end)
    kv_attended: tuple[int, int]
    flow: torch.Tensor
    x0: torch.Tensor


@dataclass
class RunResult:
    calls: list[CallRecord] = field(default_factory=list)
    latents: torch.Tensor | None = None  # SF: output_latents; Krea: the session's all_latents buffer
    kv: KVCache | None = None  # SF: the cache after the last commit
    encodes: list[torch.Tensor] = field(default_factory=list)  # Krea: every VAE encode, [1, C, F, h, w], in order
    encode_pixels: dict[int, torch.Tensor] = field(default_factory=dict)  # anchor encodes' input frames
    session_noise: torch.Tensor | None = None  # v2v: the noised input latents
    pixels_sent: list[int] = field(default_factory=list)  # Krea: decoded pixel frames output per block
    stopped: str | None = None  # why the block loop ended early (Krea start frame: the noise ran out)


class Driver:
    """Runs CausalWan calls under the prompt of the fixture, recording each one."""

    def __init__(self, fx: PixelsFixture, schedule: FlowMatchSchedule = FlowMatchSchedule()):
        self.fx, self.schedule = fx, schedule
        self.model = CausalWan(fx.net, fx.dit_cfg)
        self.text = self.model.encode_text(fx.T["text_context"])
        self.result = RunResult()

    def empty_kv(self, frames: int) -> KVCache:
        return KVCache.empty(self.fx.dit_cfg, batch=1, window_frames=frames, tokens_per_frame=self.fx.tokens_per_frame,
                             device="cpu", dtype=torch.float32)

    def call(self, kind: str, block: int, x: torch.Tensor, t: float, kv: KVCache, rope_start: int,
             commit: bool) -> tuple[torch.Tensor, KVCache]:
        """One forward of x [1, F, C, h, w] at timestep t appended to `kv` (committed or scratch); x0 with sigma(t)."""
        f, tpf = x.shape[1], self.fx.tokens_per_frame
        timestep = torch.full((1, f), t, dtype=torch.float32)
        before = kv.frames
        out = self.model.forward(x, timestep, self.text, frame_offset=rope_start, kv=kv, commit=commit)
        x0 = flow_to_x0(x, out.flow, self.schedule.sigma(t))
        self.result.calls.append(CallRecord(kind, block, x, timestep, tuple(range(rope_start, rope_start + f)),
                                            (before * tpf, (before + f) * tpf), (0, (before + f) * tpf), out.flow, x0))
        return x0, out.kv

    def denoise(self, block: int, x: torch.Tensor, plan: StepPlan, kv: KVCache, rope_start: int,
                renoise: list[torch.Tensor]) -> torch.Tensor:
        """The plan's calls on one block from input x, re-noised between them with `renoise` (one per later step)."""
        for k, t in enumerate(plan.timesteps):
            x0, _ = self.call("denoise", block, x, t, kv, rope_start, commit=False)
            if k + 1 < plan.num_steps:
                x = add_noise(x0, renoise[k].reshape(x0.shape), plan.sigmas[k + 1])
        return x0


# ------------------------------------------------------------------------------------------------- Self-Forcing
def prefix_groups(given_frames: int, frames_per_block: int) -> list[tuple[int, int]]:
    """How SF's pipeline feeds given latents into the cache: one group of 1 with `independent_first_frame` (a start
    image), else groups of a block each (their count must be a multiple of the block, causal_inference.py 152-169)."""
    if given_frames == 1:
        return [(0, 1)]
    if given_frames % frames_per_block:
        raise ValueError(f"Self-Forcing takes given latents in whole blocks of {frames_per_block}, got {given_frames}")
    return [(s, s + frames_per_block) for s in range(0, given_frames, frames_per_block)]


def run_self_forcing(fx: PixelsFixture, name: str) -> RunResult:
    """SF `CausalInferencePipeline.inference(noise, initial_latent)` (PIXELS.md P2-P3)."""
    T, F = fx.T, fx.frames_per_block
    drv = Driver(fx)
    plan = self_forcing_plan()
    given = T[f"{name}/initial_latent"]  # [1, n, C, h, w]
    n = given.shape[1]
    blocks = fx.meta["sizes"]["blocks"]
    kv = drv.empty_kv(n + F * blocks)
    for s, e in prefix_groups(n, F):  # clean t = 0 calls at RoPE s..e-1: they only fill the cache
        _, kv = drv.call("prefix", -1, given[:, s:e], 0.0, kv, s, commit=True)
    outputs = [given]  # the given latents are output verbatim
    for b in range(blocks):
        start = n + F * b  # block b's first latent frame = its RoPE position
        renoise = [T["renoise_noise"][b, k] for k in range(plan.num_renoise)]
        x0 = drv.denoise(b, T["initial_noise"][:, F * b:F * (b + 1)], plan, kv, start, renoise)
        outputs.append(x0)
        _, kv = drv.call("commit", b, x0, 0.0, kv, start, commit=True)
    drv.result.latents, drv.result.kv = torch.cat(outputs, dim=1), kv
    return drv.result


# --------------------------------------------------------------------------------------------------------- Krea
class KreaSession:
    """Krea's `GenerationSession` block loop (fixtures README §14-17, PIXELS.md P4-P5) over the pack's blocks."""

    def __init__(self, fx: PixelsFixture, name: str):
        self.fx, self.name = fx, name
        self.run = fx.meta["krea"][name]
        self.drv = Driver(fx)
        self.vae = fx.vae
        self.plan = krea_strength_plan(self.run["strength"])  # computed once, at session creation
        self.draws = self._draws()
        self.F, self.ctx = fx.frames_per_block, 3  # kv_cache_num_frames (server default)
        sizes = fx.meta["krea_sizes"]
        n = self.F * sizes["blocks"]
        self.all_latents = torch.zeros(1, n, fx.dit_cfg.in_dim, sizes["latent_h"], sizes["latent_w"])
        self.noise = next(self.draws)  # the session's initial noise, drawn first in every run
        self.num_blocks = sizes["blocks"]
        self.current_start = 0
        self.decoder_cache = None
        self.history: deque[torch.Tensor] = deque(maxlen=1 + (self.ctx - 1) * fx.vae.config.temporal_compression)
        self.encoder_cache = None  # webcam mode: one streaming encoder cache for the session

    def _draws(self):
        for i in range(len(self.run["random_draws"])):
            yield self.fx.T[f"{self.name}/draw{i}"]

    def _encode(self, latents_bcfhw: torch.Tensor, pixels: torch.Tensor | None = None) -> None:
        if pixels is not None:
            self.drv.result.encode_pixels[len(self.drv.result.encodes)] = pixels
        self.drv.result.encodes.append(latents_bcfhw)

    def _clip(self, start: int, end: int) -> torch.Tensor:
        """Stored clip frames [start, end) as the decoder would hand them over, in the VAE range [1, 3, T, H, W]."""
        u8 = self.fx.T["input_clip_u8"][start:end]  # [T, H, W, 3]
        return to_vae_range(u8.float() / 255).permute(3, 0, 1, 2).unsqueeze(0)

    # -- setup ---------------------------------------------------------------------------------------------------
    def setup_input_video(self) -> None:
        """`encode_v2v` at session creation: the whole clip in one encode, noised once with a = t0 / 1000."""
        clip = self._clip(0, self.run["input_video_pixel_frames"])
        latents = encode_clip(self.vae, clip, self.fx.pixel_hw)  # [1, F, C, h, w]
        self._encode(latents.permute(0, 2, 1, 3, 4))
        self.noise = noise_input(latents, next(self.draws), self.plan)
        self.drv.result.session_noise = self.noise
        self.num_blocks = min(latents.shape[1] // self.F - 1, self.num_blocks)  # release_server 429-430

    def setup_start_frame(self) -> None:
        """`setup_start_frame`: the image repeated 1 + (ctx - 1) * 4 times and encoded; the latents seed block 0's
        context."""
        u8 = self.fx.T["start_image_u8"]  # [H, W, 3]
        image = ((u8.float() / 255 - 0.5) * 2).permute(2, 0, 1).unsqueeze(0)  # push_frame / setup_start_frame
        assert start_frame_repeats(self.ctx, self.vae.config.temporal_compression) == 9
        latents = encode_start_frame(self.vae, image, self.fx.pixel_hw, self.ctx)  # [1, ctx, C, h, w]
        self._encode(latents.permute(0, 2, 1, 3, 4))
        self.all_latents[:, :latents.shape[1]] = latents
        self.current_start = latents.shape[1]

    # -- per block -------------------------------------------------------------------------------------------------
    def context(self, b: int) -> torch.Tensor:
        """`get_clean_context_frames`: latent frame 0 + the newest ctx-1 while (b - 1) * F < ctx, then the anchor (the
        oldest of the newest 9 decoded pixel frames, re-encoded) + the newest ctx-1."""
        clean = self.all_latents[:, :self.current_start]
        newest = clean[:, 1:][:, -(self.ctx - 1):]
        if (b - 1) * self.F < self.ctx:
            return torch.cat([clean[:, :1], newest], dim=1)
        frame = self.history[0]  # [1, 3, H, W]
        anchor = self.vae.encode_anchor_frame(frame, self.fx.pixel_hw)  # [1, C, 1, h, w]
        self._encode(anchor, frame.unsqueeze(2))
        return torch.cat([anchor.permute(0, 2, 1, 3, 4), newest], dim=1)

    def block(self, b: int, stream_frames: tuple[int, int] | None) -> bool:
        """One `generate_block_internal`; False when the reference stops (no noise left for the block)."""
        drv, F = self.drv, self.F
        kv = drv.empty_kv(self.ctx + F)  # the KV cache is reset every block
        rope_start = 0
        if b > 0 or self.current_start > 0:  # recompute_kv_cache: rebuild from clean context frames
            ctx = self.context(b)
            _, kv = drv.call("kv_rebuild", b, ctx, 0.0, kv, 0, commit=True)
            rope_start = min(self.current_start, self.ctx)
        if stream_frames is not None:  # webcam mode: this block's frames, encoded continuing the session's cache
            latents, self.encoder_cache = self.vae.encode_stream(self._clip(*stream_frames), self.encoder_cache)
            self._encode(latents)
            noisy = noise_input(latents.permute(0, 2, 1, 3, 4), next(self.draws), self.plan)  # per block
        else:
            noisy = self.noise[:, self.current_start:self.current_start + F]
            if noisy.shape[1] < F:
                drv.result.stopped = f"block {b}: no noise left for latent frames {self.current_start}.."
                return False
        renoise = [next(self.draws) for _ in range(self.plan.num_renoise)]
        x0 = drv.denoise(b, noisy, self.plan, kv, rope_start, renoise)
        self.all_latents[:, self.current_start:self.current_start + F] = x0
        pixels, self.decoder_cache = self.vae.decode_stream(x0.permute(0, 2, 1, 3, 4), self.decoder_cache,
                                                            rule=KREA_DECODE_RULE)
        pixels = pixels.clamp(-1, 1)  # [1, 3, T, H, W]
        self.history.extend(pixels[:, :, i] for i in range(pixels.shape[2]))
        drv.result.pixels_sent.append(pixels.shape[2] - (KREA_FIRST_BLOCK_DROPPED if b == 0 else 0))
        self.current_start += F
        return True

    def generate(self) -> RunResult:
        stream = self.run.get("clip_frames_pushed_per_block")
        for b in range(self.num_blocks):
            if not self.block(b, tuple(stream[b]) if stream else None):
                break
        self.drv.result.latents = self.all_latents
        return self.drv.result


def run_krea(fx: PixelsFixture, name: str) -> RunResult:
    session = KreaSession(fx, name)
    if "input_video_pixel_frames" in session.run:  # an input video given at session creation (not pushed)
        session.setup_input_video()
    elif name == "krea_start_frame":
        session.setup_start_frame()
    return session.generate()


def run(fx: PixelsFixture, name: str) -> RunResult:
    return run_self_forcing(fx, name) if name in SF_RUNS else run_krea(fx, name)
