"""The Wan VAE encoder on video: parity with pixels_tiny's `vae_encode` and Krea encodes, streaming with an immutable
EncoderCache (any split gives the same bits as one call), Cancel, and memory that stays flat in the video's length."""
from __future__ import annotations

import dataclasses
import json
import weakref
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from sdvg_core import WanVAE, WanVAEConfig
from sdvg_core.demo.tiny import random_vae
from sdvg_core.given.encode import clip_frames, encode_clip, encode_start_frame, resize_to_run

ATOL = 1e-4  # fixtures README §5: honest float32 implementations land at 1e-6..1e-5


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()


@pytest.fixture(scope="module")
def pixels(fixtures_dir_module) -> tuple[dict, dict[str, torch.Tensor], WanVAE]:
    d = fixtures_dir_module / "pixels_tiny"
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    v = meta["sizes"]["vae"]
    cfg = WanVAEConfig(name="pixels_tiny", dim=v["dim"], z_dim=v["z_dim"], dim_mult=tuple(v["dim_mult"]),
                       num_res_blocks=v["num_res_blocks"], attn_scales=tuple(v["attn_scales"]),
                       temporal_downsample=tuple(v["temperal_downsample"]))
    vae = WanVAE.from_state_dict(load_file(fixtures_dir_module / "wan_vae_tiny" / "weights.safetensors"), config=cfg)
    return meta, load_file(d / "tensors.safetensors"), vae


@pytest.fixture(scope="module")
def fixtures_dir_module() -> Path:
    from conftest import require_shared

    return require_shared("fixtures")


def _split(video: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    out, s = [], 0
    for n in sizes:
        out.append(video[:, :, s:s + n])
        s += n
    assert s == video.shape[2]
    return out


# ------------------------------------------------------------------------------------------------ fixture parity
def test_video_encode_matches_reference_at_every_length(pixels):
    meta, T, vae = pixels
    video = T["vae_encode/video"]  # [1, 3, 13, H, W]
    for t in meta["sizes"]["vae_T"]:
        latent = vae.encode(video[:, :, :t]).permute(0, 2, 1, 3, 4)  # B C F H W -> B F C H W (the wrapper's layout)
        golden = T[f"vae_encode/T{t}/latent"]
        assert latent.shape[1] == 1 + (t - 1) // 4 == meta["vae_encode"][f"T{t}"]["latent_frames"]
        d = max_diff(latent, golden)
        print(f"[encode parity] T{t}: {d:.2e}")
        assert d <= ATOL
    assert torch.equal(torch.tensor(vae.config.latent_mean), T["vae_encode/latent_mean"])
    assert torch.equal(torch.tensor(vae.config.latent_std), T["vae_encode/latent_std"])


@pytest.mark.parametrize("sizes", [[13], [1, 4, 4, 4], [1] * 13, [3, 7, 3], [2, 2, 2, 2, 5], [5, 8]])
def test_any_split_gives_the_one_shot_bits(pixels, sizes):
    _, T, vae = pixels
    video = T["vae_encode/video"]
    one_shot = vae.encode(video)
    cache, outs = None, []
    for piece in _split(video, sizes):
        latent, cache = vae.encode_stream(piece, cache)
        outs.append(latent)
    assert torch.equal(torch.cat(outs, dim=2), one_shot)
    assert cache.frames_consumed == 13 and cache.pending_frames == 0
    assert torch.equal(torch.cat(list(vae.encode_chunks(_split(video, sizes))), dim=2), one_shot)


def test_pending_frames_wait_for_their_chunk(pixels):
    _, T, vae = pixels
    video = T["vae_encode/video"]
    z, cache = vae.encode_stream(video[:, :, :3])  # frame 0 alone, then 2 of the next chunk's 4
    assert z.shape[2] == 1 and cache.frames_consumed == 1 and cache.pending_frames == 2
    z2, cache2 = vae.encode_stream(video[:, :, 3:4], cache)  # still short of 4
    assert z2.shape[2] == 0 and cache2.pending_frames == 3 and cache.pending_frames == 2  # the old cache unchanged
    z3, cache3 = vae.encode_stream(video[:, :, 4:7], cache2)  # 3 + 3 -> one chunk of 4, 2 wait
    assert z3.shape[2] == 1 and cache3.frames_consumed == 5 and cache3.pending_frames == 2
    assert torch.equal(torch.cat([z, z3], dim=2), vae.encode(video[:, :, :5]))


def test_encoding_never_mutates_the_cache(pixels):
    _, T, vae = pixels
    video = T["vae_encode/video"]
    _, cache = vae.encode_stream(video[:, :, :7])
    snap = [None if h is None else (h.data_ptr(), h.clone()) for h in cache.histories]
    pending = cache.pending.clone()
    a, _ = vae.encode_stream(video[:, :, 7:], cache)
    b, _ = vae.encode_stream(video[:, :, 7:], cache)  # the same cache twice: the same bits
    assert torch.equal(a, b) and torch.equal(cache.pending, pending) and cache.frames_consumed == 5
    for h, s in zip(cache.histories, snap, strict=True):
        assert (h is None) == (s is None) and (h is None or (h.data_ptr() == s[0] and torch.equal(h, s[1])))
    assert len(cache.histories) == vae.encoder_slots and cache.nbytes > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cache.frames_consumed = 0  # type: ignore[misc]
    with pytest.raises(ValueError, match="encoder cache is for batch/size"):
        vae.encode_stream(torch.zeros(1, 3, 4, 16, 24), cache)


def test_krea_encodes_match_reference(pixels):
    meta, T, vae = pixels
    hw = (meta["krea_sizes"]["pixel_h"], meta["krea_sizes"]["pixel_w"])
    u8 = T["input_clip_u8"]  # [57, H, W, 3]
    clip = ((u8.float() / 255 - 0.5) / 0.5).permute(3, 0, 1, 2).unsqueeze(0)  # what encode_v2v is handed
    latents = encode_clip(vae, clip, hw)  # [1, F, C, h, w]
    assert latents.shape[1] == 1 + (clip_frames(57) - 1) // 4 == 15
    for run in ("v2v_s070", "v2v_s050"):
        assert max_diff(latents.permute(0, 2, 1, 3, 4), T[f"{run}/encode0/latent"]) <= ATOL
    # read as the video goes (pieces of 5): the same bits as the one-shot encode
    assert torch.equal(encode_clip(vae, _split(clip, [5] * 11 + [2]), hw), latents)
    image = ((T["start_image_u8"].float() / 255 - 0.5) * 2).permute(2, 0, 1).unsqueeze(0)
    start = encode_start_frame(vae, image, hw, context_frames=3)
    assert start.shape[1] == 3
    assert max_diff(start.permute(0, 2, 1, 3, 4), T["krea_start_frame/encode0/latent"]) <= ATOL
    # webcam: one encoder cache for the whole session, 9 frames then 12 per block
    cache = None
    for i, (s, e) in zip((0, 1, 3, 5), meta["krea"]["v2v_stream"]["clip_frames_pushed_per_block"]):
        z, cache = vae.encode_stream(clip[:, :, s:e], cache)
        assert max_diff(z, T[f"v2v_stream/encode{i}/latent"]) <= ATOL


def test_self_forcing_initial_latents_are_encodes_of_the_clip(pixels):
    _, T, vae = pixels
    video = T["vae_encode/video"]
    assert max_diff(vae.encode(video[:, :, :1]).permute(0, 2, 1, 3, 4), T["start_frame/initial_latent"]) <= ATOL
    assert max_diff(vae.encode(video[:, :, :9]).permute(0, 2, 1, 3, 4), T["extend/initial_latent"]) <= ATOL


def test_anchor_encode_is_the_one_frame_stream():
    vae = random_vae(3)
    frame = torch.rand(1, 3, 32, 48) * 2 - 1
    assert torch.equal(vae.encode_anchor_frame(frame, (32, 48)), vae.encode_stream(frame.unsqueeze(2))[0])


def test_resize_to_run_is_krea_bicubic_and_identity_at_size():
    frames = torch.rand(1, 3, 2, 40, 56) * 2 - 1
    out = resize_to_run(frames, (37, 53), 8)  # the run's size rounded down to the VAE stride: 32 x 48
    assert out.shape == (1, 3, 2, 32, 48)
    ref = torch.nn.functional.interpolate(frames[0].permute(1, 0, 2, 3), size=(32, 48), mode="bicubic")
    assert torch.equal(out[0].permute(1, 0, 2, 3), ref)
    assert resize_to_run(out, (32, 48), 8) is out


# -------------------------------------------------------------------------------------------------------- Cancel
class Cancelled(Exception):
    pass


def test_cancel_stops_within_one_block_and_changes_nothing():
    vae = random_vae(1)
    video = torch.rand(1, 3, 9, 16, 24) * 2 - 1
    _, cache = vae.encode_stream(video[:, :, :5])
    started = [0]
    for m in (*vae.encoder.downsamples, *vae.encoder.middle):
        m.register_forward_pre_hook(lambda *_: started.__setitem__(0, started[0] + 1))
    calls = [0]

    def interrupt() -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise Cancelled

    with pytest.raises(Cancelled):
        vae.encode_stream(video[:, :, 5:], cache, interrupt=interrupt)
    assert started[0] == 2  # the checks run before every encoder block: two blocks ran, the third never started
    assert cache.frames_consumed == 5 and cache.pending is None
    assert torch.equal(vae.encode_stream(video[:, :, 5:], cache)[0], vae.encode(video)[:, :, 2:])


# ------------------------------------------------------------------------------------------------- flat memory
class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of the tensors alive at once, counted per storage as every op creates them and freed when their
    last tensor dies (tensors made before the mode are not counted; kernels' internal scratch is not either)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.live = self.peak = 0

    def _drop(self, key: int) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.live -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in self.refs:
                    self.refs[key], self.sizes[key] = 0, storage.nbytes()
                    self.live += storage.nbytes()
                self.refs[key] += 1
                weakref.finalize(t, self._drop, key)
        self.peak = max(self.peak, self.live)
        return out


def _pieces(frames: int, log: list[str] | None = None):
    """Seeded pixel pieces of 4 frames [1, 3, t, 32, 48], made only when asked (as a file reader hands them over)."""
    gen = torch.Generator().manual_seed(0)
    for s in range(0, frames, 4):
        if log is not None:
            log.append("read")
        yield torch.rand(1, 3, min(4, frames - s), 32, 48, generator=gen) * 2 - 1


def _peak_bytes(vae: WanVAE, frames: int, stream: bool) -> int:
    with torch.no_grad(), LiveTensorBytes() as live:
        if stream:
            n = sum(z.shape[2] for z in vae.encode_chunks(_pieces(frames)))
        else:
            n = vae.encode(torch.cat(list(_pieces(frames)), dim=2)).shape[2]
    assert n == 1 + (frames - 1) // 4
    return live.peak


@pytest.mark.slow
def test_streaming_encode_memory_is_flat_in_the_videos_length():
    """Peak live tensor bytes encoding N vs 4N frames read piece by piece: the same (one piece, the causal histories
    and one chunk's activations), while the whole video as one tensor grows with it. scripts/encode_memory_probe.py
    measures the same as process RSS at larger sizes (docs/pixels.md)."""
    vae = random_vae(0)
    n = 12
    stream = [_peak_bytes(vae, f, stream=True) for f in (n, 4 * n)]
    whole = [_peak_bytes(vae, f, stream=False) for f in (n, 4 * n)]
    frame_bytes = 3 * 32 * 48 * 4
    print(f"\n[encode memory] peak live tensors, stream {n} / {4 * n} frames: {stream[0]} / {stream[1]} B; "
          f"one tensor: {whole[0]} / {whole[1]} B")
    assert stream[1] == stream[0]
    assert whole[1] - whole[0] >= 3 * n * frame_bytes  # the measure sees a video held whole


def test_pieces_are_read_only_as_the_encoder_needs_them():
    vae = random_vae(0)
    log: list[str] = []
    for _ in vae.encode_chunks(_pieces(13, log)):
        log.append("latents")
    # each piece is read after the previous one's latents were handed on (piece 0: frame 0 alone + 3 pending)
    assert log == ["read", "latents", "read", "latents", "read", "latents", "read", "latents"]
