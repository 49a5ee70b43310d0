"""TAEHV (taew2_1 tiny decoder): parity with the reference's golden tensors (run with -s to see the measured diffs),
the streaming rules the router relies on (the carried MemBlock inputs, the first-frame trim, a memory that is never
modified), and loading taew2_1 / lighttaew2_1 files through the one checkpoint reader.

Every test needs the golden tensors (fixtures/taehv_tiny); without them the whole file skips, saying where it looked.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import require_shared
from safetensors.torch import load_file, save_file

from sdvg_core import CheckpointError, TAEHV, TAEHVConfig, TAEHVMemory, load_taehv
from sdvg_core.io.checkpoint import file_identity
from sdvg_core.models.taehv import TAEHV_PRESETS, detect_taehv_config, run_layers
from sdvg_core.models.vae import WAN21_LATENT_MEAN, WAN21_LATENT_STD, DecoderCache

DECODE_ATOL = 1e-5  # fixture README: covers thread count and conv batching
ENCODE_ATOL = 1e-4
BLOCK = 3  # latent frames per block (case c)
FIXTURE = "fixtures/taehv_tiny"


@pytest.fixture(scope="module")
def fixture_dir() -> Path:
    return require_shared(FIXTURE)


@pytest.fixture(autouse=True)
def _needs_fixtures(fixture_dir: Path) -> None:
    """Every test of this file reads the golden tensors: skip them all, saying where they were looked for."""


@pytest.fixture(scope="module")
def weights(fixture_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(fixture_dir / "weights.safetensors")


@pytest.fixture(scope="module")
def golden(fixture_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(fixture_dir / "tensors.safetensors")


@pytest.fixture(scope="module")
def meta(fixture_dir: Path) -> dict:
    return json.loads((fixture_dir / "meta.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def model(weights) -> TAEHV:
    return TAEHV.from_state_dict(weights)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()


def report(name: str, diff: float, atol: float) -> None:
    print(f"[taehv parity] {name}: max abs diff {diff:.3e}")
    assert diff <= atol, f"{name}: {diff} > {atol}"


def to_unit_ntchw(pixels_ncthw: torch.Tensor) -> torch.Tensor:
    """decode_stream's [B, 3, T, H, W] in [-1, 1] -> the reference's [B, T, 3, H, W] in [0, 1]."""
    return ((pixels_ncthw + 1) / 2).transpose(1, 2)


def stream(m: TAEHV, z: torch.Tensor, sizes: list[int], memory: TAEHVMemory | None = None):
    """Decode NCTHW latents in chunks of `sizes` latent frames; (list of pixel chunks, final memory)."""
    chunks, start = [], 0
    for n in sizes:
        px, memory = m.decode_stream(z[:, :, start:start + n], memory)
        chunks.append(px)
        start += n
    return chunks, memory


# ----------------------------------------------------------------------------------------------------- parity
@pytest.mark.parametrize("frames_per_pass", [1, 64], ids=["frame-by-frame", "all-at-once"])
@pytest.mark.parametrize("case", ["a", "b", "d", "e"])
def test_whole_decode_matches_reference(weights, golden, case, frames_per_pass):
    m = TAEHV.from_state_dict(weights)
    m.frames_per_pass = frames_per_pass
    out = m.decode_video(golden[f"{case}.latent"])
    t = golden[f"{case}.latent"].shape[1]
    assert out.shape[1] == 4 * t - 3 == m.config.pixel_frames(t)
    assert out.min() >= 0 and out.max() <= 1  # clamped
    report(f"decode {case} ({frames_per_pass} latent frames per pass)", max_diff(out, golden[f"{case}.frames"]),
           DECODE_ATOL)


def test_pack_surface_decode_is_the_reference_decode_in_minus_one_to_one(model, golden):
    z = golden["b.latent"].transpose(1, 2)  # NTCHW -> NCTHW, as WanVAE takes it
    pixels = model.decode(z)
    assert pixels.shape == (1, 3, 33, 64, 96) and pixels.is_contiguous()
    assert pixels.min() >= -1 and pixels.max() <= 1
    report("decode b via decode()", max_diff(to_unit_ntchw(pixels), golden["b.frames"]), DECODE_ATOL)


def test_streaming_blocks_match_reference_and_the_whole_decode(model, golden, meta):
    z = golden["c.latent"].transpose(1, 2)  # [1, 16, 9, 8, 12]
    chunks, memory = stream(model, z, [BLOCK] * 3)
    assert [c.shape[2] for c in chunks] == meta["cases"]["c"]["block_frames"] == [9, 12, 12]
    for i, px in enumerate(chunks):
        report(f"stream c block {i}", max_diff(to_unit_ntchw(px), golden[f"c.block{i}.frames"]), DECODE_ATOL)
    assert memory.frames_consumed == 9
    whole = model.decode(z)
    assert torch.equal(torch.cat(chunks, dim=2), whole)  # one latent frame per pass: same bits for any chunking


def test_any_chunking_gives_the_same_bits(model, golden):
    z = golden["b.latent"].transpose(1, 2)
    whole = model.decode(z)
    for sizes in ([1, 2, 3, 3], [4, 5], [1] * 9):
        assert torch.equal(torch.cat(stream(model, z, sizes)[0], dim=2), whole), sizes


def test_several_frames_per_pass_stream_to_the_same_values(weights, golden):
    z = golden["c.latent"].transpose(1, 2)
    m = TAEHV.from_state_dict(weights)
    m.frames_per_pass = BLOCK
    chunks, _ = stream(m, z, [BLOCK] * 3)
    for i, px in enumerate(chunks):
        report(f"stream c block {i}, 3 frames per pass", max_diff(to_unit_ntchw(px), golden[f"c.block{i}.frames"]),
               DECODE_ATOL)


def test_encode_matches_reference(weights, golden):
    for frames_per_pass in (1, 8):
        m = TAEHV.from_state_dict(weights)
        m.frames_per_pass = frames_per_pass
        latents = m.encode_video(golden["f.pixels"])
        assert latents.shape == golden["f.latent"].shape == (1, 3, 16, 4, 6)
        report(f"encode f ({frames_per_pass} latent frames per pass)", max_diff(latents, golden["f.latent"]),
               ENCODE_ATOL)


def test_pack_surface_encode_takes_minus_one_to_one_ncthw(model, golden):
    video = (golden["f.pixels"] * 2 - 1).transpose(1, 2)  # [1, 3, 9, 32, 48]
    latents = model.encode(video)
    assert latents.shape == (1, 16, 3, 4, 6)
    report("encode f via encode()", max_diff(latents.transpose(1, 2), golden["f.latent"]), ENCODE_ATOL)


def test_encode_pads_the_end_with_the_last_frame(model, golden):
    pixels = golden["f.pixels"]  # 9 frames: padded to 12 with copies of frame 8
    padded = torch.cat([pixels, pixels[:, -1:].expand(-1, 3, -1, -1, -1)], dim=1)
    assert torch.equal(model.encode_video(pixels), model.encode_video(padded))
    with pytest.raises(ValueError, match="multiples of 8"):
        model.encode_video(pixels[..., :30, :])


# ----------------------------------------------------------------------------------------------------- the rules
def test_a_block_without_the_carried_memory_differs(model, golden):
    """Block 1 decoded from a memory whose inputs were dropped (or with one MemBlock's input dropped) is wrong."""
    z = golden["c.latent"].transpose(1, 2)
    _, memory = stream(model, z, [BLOCK])
    right = golden["c.block1.frames"]
    dropped = TAEHVMemory(inputs=(None,) * model.decoder_slots, frames_consumed=memory.frames_consumed)
    px, _ = model.decode_stream(z[:, :, BLOCK:2 * BLOCK], dropped)
    diff = max_diff(to_unit_ntchw(px), right)
    print(f"[taehv] block 1 without carried memory: max abs diff {diff:.3f}")
    assert diff > 0.05
    for slot in (0, model.decoder_slots - 1):  # the first and the last MemBlock each matter
        inputs = list(memory.inputs)
        inputs[slot] = None
        px, _ = model.decode_stream(z[:, :, BLOCK:2 * BLOCK], dataclasses.replace(memory, inputs=tuple(inputs)))
        assert max_diff(to_unit_ntchw(px), right) > 1e-3, slot
    fresh, _ = model.decode_stream(z[:, :, BLOCK:2 * BLOCK], None)  # decoded as a video of its own: 9 frames
    assert fresh.shape[2] == 9


def test_the_first_three_raw_frames_are_trimmed(model, golden):
    """The raw decoder gives 4 frames per latent frame; a video keeps raw frames 3, 4, ... (4T - 3 frames)."""
    latent = golden["a.latent"]  # [1, 3, 16, 6, 10]
    raw, _ = run_layers(model.decoder, latent.flatten(0, 1), 1, (None,) * model.decoder_slots)
    raw = raw.view(1, -1, *raw.shape[1:]).clamp(0, 1)  # [1, 12, 3, 48, 80]
    assert raw.shape[1] == 4 * latent.shape[1]
    out = model.decode_video(latent)
    assert max_diff(out, raw[:, model.config.frames_to_trim:]) <= 1e-6  # all frames in one pass: rounding only
    assert max_diff(raw[:, 2:-1], golden["a.frames"]) > 1e-2  # trimming one frame fewer is visibly wrong
    assert [model.config.pixel_frames(t) for t in (1, 3, 9)] == [1, 9, 33]
    assert model.config.pixel_frames(3, includes_first=False) == 12 and model.config.pixel_frames(0) == 0


def test_streaming_never_modifies_the_memory_it_was_given(model, golden):
    """A rejected draft decoded from memory M, then the committed block from M again: the straight sequence."""
    z = golden["c.latent"].transpose(1, 2)
    _, memory = stream(model, z, [BLOCK])
    before = [(t.data_ptr(), t._version, t.clone()) for t in memory.inputs]
    draft = torch.randn(1, 16, BLOCK, 8, 12, generator=torch.Generator().manual_seed(5))
    _, draft_memory = model.decode_stream(draft, memory)  # decoded, scored, rejected: its memory is dropped
    for t, (ptr, version, copy) in zip(memory.inputs, before):
        assert t.data_ptr() == ptr and t._version == version and torch.equal(t, copy)
    assert memory.frames_consumed == BLOCK and draft_memory.frames_consumed == 2 * BLOCK
    assert not {t.data_ptr() for t in memory.inputs} & {t.data_ptr() for t in draft_memory.inputs}
    committed, _ = model.decode_stream(z[:, :, BLOCK:2 * BLOCK], memory)
    straight, _ = stream(model, z, [BLOCK, BLOCK])
    assert torch.equal(committed, straight[1])
    report("committed block after a rejected draft", max_diff(to_unit_ntchw(committed), golden["c.block1.frames"]),
           DECODE_ATOL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.frames_consumed = 0  # type: ignore[misc]


def test_an_interrupted_decode_changes_nothing(model, golden):
    z = golden["c.latent"].transpose(1, 2)
    _, memory = stream(model, z, [BLOCK])
    copies = [t.clone() for t in memory.inputs]
    calls = []

    def interrupt():
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model.decode_stream(z[:, :, BLOCK:], memory, interrupt=interrupt)
    assert all(torch.equal(t, c) for t, c in zip(memory.inputs, copies))
    counted = []
    model.decode_stream(z[:, :, :1], None, interrupt=lambda: counted.append(1))
    assert len(counted) == 1 + model.decoder_slots  # before the pass and before every MemBlock


def test_krea_rule_decodes_as_standard_and_other_rules_are_refused(model, golden):
    z = golden["c.latent"].transpose(1, 2)
    standard, _ = stream(model, z, [BLOCK, BLOCK])
    krea = [model.decode_stream(z[:, :, :BLOCK], None, rule="krea")]
    krea.append(model.decode_stream(z[:, :, BLOCK:2 * BLOCK], krea[0][1], rule="krea"))
    assert all(torch.equal(a, b[0]) for a, b in zip(standard, krea))
    with pytest.raises(ValueError, match="not 'selfforcing_demo'"):
        model.decode_stream(z, None, rule="selfforcing_demo")
    with pytest.raises(ValueError, match="not 'bogus'"):
        model.empty_decoder_cache("bogus")


def test_memory_bookkeeping_and_validation(model, golden):
    z = golden["e.latent"].transpose(1, 2)  # batch of 2: [2, 16, 2, 4, 6]
    empty = model.empty_decoder_cache()
    assert empty.nbytes == 0 and empty.frames_consumed == 0 and len(empty.inputs) == model.decoder_slots == 9
    px, memory = model.decode_stream(z, empty)
    report("decode e via decode_stream", max_diff(to_unit_ntchw(px), golden["e.frames"]), DECODE_ATOL)
    widths = model.config.decoder_widths
    assert [tuple(t.shape[:2]) for t in memory.inputs] == [(2, w) for w in widths[:3] for _ in range(3)]
    assert [tuple(t.shape[2:]) for t in memory.inputs[::3]] == [(4, 6), (8, 12), (16, 24)]
    assert memory.nbytes == sum(t.numel() * 4 for t in memory.inputs)
    half = memory.to(dtype=torch.bfloat16)
    assert half.nbytes == memory.nbytes // 2 and half.frames_consumed == 2 and memory.inputs[0].dtype == torch.float32
    with pytest.raises(ValueError, match="batch/size"):
        model.decode_stream(z[:1], memory)
    with pytest.raises(ValueError, match="batch/size"):
        model.decode_stream(torch.zeros(2, 16, 1, 5, 6), memory)
    with pytest.raises(TypeError, match="TAEHVMemory"):
        model.decode_stream(z, DecoderCache(histories=(None,) * 9))
    with pytest.raises(ValueError, match="slots"):
        model.decode_stream(z, TAEHVMemory(inputs=(None,) * 8))
    with pytest.raises(ValueError, match=r"\[B, 16, T>0"):
        model.decode_stream(z[:, :, :0], None)


def test_the_wan_vae_surface(model):
    c = model.config
    assert (c.temporal_compression, c.spatial_compression, c.z_dim, c.frames_to_trim) == (4, 8, 16, 3)
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    assert model.key is None  # set by the loaders


def test_raw_latent_space_unnormalises_before_decoding(weights, golden):
    """lighttaew2_1 takes the Wan VAE's own latents: decode_stream(z) = the normalised decoder on z * std + mean."""
    normalised = TAEHV.from_state_dict(weights)
    raw = TAEHV.from_state_dict(weights, latent_space="raw")
    assert raw.config.latent_space == "raw"
    z = golden["a.latent"].transpose(1, 2)
    mean = torch.tensor(WAN21_LATENT_MEAN).view(1, -1, 1, 1, 1)
    std = torch.tensor(WAN21_LATENT_STD).view(1, -1, 1, 1, 1)
    assert max_diff(raw.decode(z), normalised.decode(z * std + mean)) <= 1e-6
    assert max_diff(raw.decode(z), normalised.decode(z)) > 1e-2
    video = (golden["f.pixels"] * 2 - 1).transpose(1, 2)
    assert max_diff(raw.encode(video) * std + mean, normalised.encode(video)) <= 1e-4


# ----------------------------------------------------------------------------------------------------- key names
def test_fixture_weights_have_the_128_taew2_1_names(weights, meta, model):
    assert len(weights) == 128
    got = {k: list(v.shape) for k, v in model.state_dict().items()}
    assert got == meta["weights_keys"]
    assert TAEHVConfig.from_widths(meta["widths"]) == dataclasses.replace(model.config, name="taew2_1")
    assert model.config.encoder_width == meta["widths"]["encoder"]
    assert list(model.config.decoder_widths) == meta["widths"]["decoder_n_f"]


def test_real_taew2_1_names_and_shapes(meta):
    with torch.device("meta"):
        real = TAEHV("taew2_1")
    got = {k: list(v.shape) for k, v in real.state_dict().items()}
    assert got == meta["real_taew2_1_keys"]
    assert meta["real_taew2_1_widths"] == {"encoder": real.config.encoder_width,
                                           "decoder_n_f": list(real.config.decoder_widths)}
    shapes = {k: torch.empty(v, device="meta") for k, v in meta["real_taew2_1_keys"].items()}
    assert dataclasses.replace(detect_taehv_config(shapes), name="taew2_1") == TAEHV_PRESETS["taew2_1"]
    print(f"[taehv] taew2_1: {sum(p.numel() for p in real.parameters()) / 1e6:.2f} M parameters")


# ----------------------------------------------------------------------------------------------------- loading
def _fixture_copy(fixture_dir: Path, dest: Path) -> Path:
    shutil.copyfile(fixture_dir / "weights.safetensors", dest)
    return dest


def test_loads_pth_safetensors_and_lighttae_files(tmp_path, fixture_dir, weights, golden, model):
    pth = tmp_path / "taew2_1.pth"
    torch.save(weights, pth)
    st = _fixture_copy(fixture_dir, tmp_path / "taew2_1.safetensors")
    light = _fixture_copy(fixture_dir, tmp_path / "lighttaew2_1.safetensors")
    z = golden["b.latent"].transpose(1, 2)
    for path in (pth, st):
        m = load_taehv(path)
        assert m.config.latent_space == "normalised" and m.config.name == "taew2_1"
        assert torch.equal(m.decode(z), model.decode(z))
    m = load_taehv(light)
    assert m.config.latent_space == "raw"
    assert load_taehv(light, latent_space="normalised").config.latent_space == "normalised"
    half = load_taehv(pth, "cpu", torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half.decode(z).dtype == torch.bfloat16


def test_prefixed_files_load(tmp_path, weights):
    path = tmp_path / "taew2_1.safetensors"
    save_file({f"first_stage_model.{k}": v for k, v in weights.items()}, str(path))
    assert load_taehv(path).state_dict().keys() == weights.keys()


def test_loader_key_is_stable_and_names_file_dtype_and_latent_space(tmp_path, fixture_dir):
    path = _fixture_copy(fixture_dir, tmp_path / "taew2_1.safetensors")
    a, b = load_taehv(path), load_taehv(path)
    assert a.key == b.key == f"{file_identity(path)}|float32|normalised"
    assert load_taehv(path, dtype=torch.bfloat16).key != a.key
    assert load_taehv(path, latent_space="raw").key != a.key
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file replaced (new mtime)
    assert load_taehv(path).key != a.key


def test_decoder_only_file_loads_and_refuses_to_encode(tmp_path, weights, golden, model):
    path = tmp_path / "lighttaew2_1_decoder.safetensors"
    save_file({k: v for k, v in weights.items() if k.startswith("decoder.")}, str(path))
    m = load_taehv(path, latent_space="normalised")
    assert m.encoder is None and not m.config.has_encoder
    z = golden["d.latent"].transpose(1, 2)
    assert torch.equal(m.decode(z), model.decode(z))
    with pytest.raises(ValueError, match="decoder-only"):
        m.encode(torch.zeros(1, 3, 1, 8, 8))


@pytest.mark.parametrize("problem", ["wan_vae", "latent_channels", "missing_key", "wrong_shape", "hunyuan_name",
                                     "not_tensors"])
def test_wrong_files_are_refused_naming_the_file_and_the_problem(tmp_path, weights, problem):
    sd = dict(weights)
    name, expect = "taew2_1.pth", ""
    if problem == "wan_vae":
        sd = {"decoder.conv1.weight": torch.zeros(4, 16, 3, 3, 3), "conv2.weight": torch.zeros(16, 16, 1, 1, 1)}
        expect = "full Wan 2.1 VAE"
    elif problem == "latent_channels":
        sd["decoder.1.weight"] = torch.zeros(32, 48, 3, 3)
        expect = "48-channel latents"
    elif problem == "missing_key":
        del sd["decoder.9.conv.2.bias"]
        expect = r"missing keys: 1 \(decoder.9.conv.2.bias\)"
    elif problem == "wrong_shape":
        sd["decoder.10.conv.0.weight"] = torch.zeros(24, 40, 3, 3)
        expect = "shape mismatches: 1"
    elif problem == "hunyuan_name":
        name, expect = "taehv.pth", "HunyuanVideo"
    elif problem == "not_tensors":
        sd = {"decoder.22.bias": [1, 2, 3]}
        expect = "not tensors"
    path = tmp_path / name
    torch.save(sd, path)
    with pytest.raises(CheckpointError, match=expect) as info:
        load_taehv(path)
    assert name in str(info.value) and info.value.path == str(path)
