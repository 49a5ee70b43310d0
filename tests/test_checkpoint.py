"""The one checkpoint reader: every format x every model kind, every error naming the file, prefixes, explicit
configs, stable keys, and wrong Wan models refused (files and modules). Tiny random weights only."""
from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Callable

import pytest
import torch
from conftest import require_shared
from safetensors.torch import save_file

from sdvg_core.demo.tiny import random_vae
from sdvg_core.demo.vocab import synthetic_tiny_config, write_synthetic_vocab
from sdvg_core import CheckpointError, load_scorer, load_wan_dit, load_wan_vae, WanDiTConfig
from sdvg_core.io.checkpoint import file_identity, read_state_dict
from sdvg_core.io.reward_files import IMAGEREWARD_LAYOUT, export_state_dict, load_model
from sdvg_core.models.reward import ImageRewardError, build_model
from sdvg_core.models.state_dict import normalize_prefix
from sdvg_core.models.vae import VAE_LAYOUT
from sdvg_core.models.wan import WanDiT, build_random
from sdvg_core.models.wan_config import PRESETS, T2V_TOP_LEVEL, WrongWanModel, check_t2v, check_t2v_state_dict

FORMATS = ("safetensors", "pt-zip", "pt-state_dict")
KINDS = ("dit", "vae", "imagereward")


# ---------------------------------------------------------------------------------------------------------------
# tiny weights of each kind, and a loader per kind that reads a file
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> dict[str, dict[str, torch.Tensor]]:
    """One small random state dict per model kind, under the names its public checkpoints use."""
    vocab = write_synthetic_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return {
        "dit": build_random(PRESETS["tiny"], seed=3).state_dict(),
        "vae": random_vae(seed=4).state_dict(),
        "imagereward": export_state_dict(build_model(synthetic_tiny_config(vocab), seed=5)),
    }


def _load_dit(path: Path) -> dict[str, torch.Tensor]:
    return load_wan_dit(path)[0].state_dict()


def _load_vae(path: Path) -> dict[str, torch.Tensor]:
    return load_wan_vae(path).state_dict()


def _load_ir(path: Path) -> dict[str, torch.Tensor]:
    return export_state_dict(load_model(path))


LOADERS: dict[str, Callable[[Path], dict[str, torch.Tensor]]] = {"dit": _load_dit, "vae": _load_vae,
                                                                  "imagereward": _load_ir}


def _write(sd: dict[str, torch.Tensor], path: Path, fmt: str) -> Path:
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path.with_suffix(".safetensors")))
        return path.with_suffix(".safetensors")
    out = path.with_suffix(".pt")
    torch.save(sd if fmt == "pt-zip" else {"state_dict": sd, "epoch": 7}, out)
    return out


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    keys = set(b) - {"blip.text_encoder.embeddings.position_ids"}  # rebuilt by transformers, not read
    return all(torch.equal(a[k].float(), b[k].float()) for k in keys) and keys <= set(a)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_format_loads_every_kind(tmp_path, weights, kind, fmt):
    path = _write(weights[kind], tmp_path / kind, fmt)
    assert _equal(LOADERS[kind](path), weights[kind])


def test_self_forcing_entries_and_reader_report(tmp_path, weights):
    other = build_random(PRESETS["tiny"], seed=9).state_dict()
    path = tmp_path / "self_forcing_dmd.pt"
    torch.save({"generator": other, "generator_ema": {f"model.{k}": v for k, v in weights["dit"].items()}}, path)
    sd, entry = read_state_dict(path)
    assert entry == "generator_ema" and "model.patch_embedding.weight" in sd
    net, _, rep = load_wan_dit(path, pt_entry="generator")
    assert rep.entry == "generator" and _equal(net.state_dict(), other)


# ---------------------------------------------------------------------------------------------------------------
# errors: one CheckpointError per problem, naming the file, for every kind
# ---------------------------------------------------------------------------------------------------------------
def _bad_files(tmp: Path, sd: dict[str, torch.Tensor]) -> dict[str, tuple[Path, str]]:
    """name -> (file, regex its error must match)."""
    rng = torch.Generator().manual_seed(0)
    noise = bytes(torch.randint(0, 256, (4096,), generator=rng, dtype=torch.uint8).tolist())
    files: dict[str, tuple[Path, str]] = {}
    folder = tmp / "folder.safetensors"
    folder.mkdir()
    files["missing"] = (tmp / "missing.safetensors", "not found")
    files["directory"] = (folder, "is a (directory|folder)")
    (tmp / "empty.pt").write_bytes(b"")
    files["empty"] = (tmp / "empty.pt", r"is empty \(0 bytes\)")
    (tmp / "noise.pt").write_bytes(noise)
    files["random .pt"] = (tmp / "noise.pt", r"not a readable checkpoint \(corrupt or truncated\)")
    (tmp / "noise.safetensors").write_bytes(noise)
    files["random .safetensors"] = (tmp / "noise.safetensors", r"not a readable checkpoint \(corrupt or truncated\)")
    good = _write(sd, tmp / "good", "safetensors")
    (tmp / "cut.safetensors").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    files["truncated .safetensors"] = (tmp / "cut.safetensors", r"not a readable checkpoint \(corrupt or truncated\)")
    torch.save({"weights": _RunsCode(tmp / "code_ran")}, tmp / "unsafe.pt")
    files["unsafe pickle"] = (tmp / "unsafe.pt", r"refused as unsafe.*run code.*\.safetensors")
    torch.save({**sd, "epoch": 3}, tmp / "mixed.pt")
    files["non-tensor entries"] = (tmp / "mixed.pt", r"expected a flat dict of tensors.*1 \(epoch\)")
    (tmp / "weights.npz").write_bytes(b"x")
    files["unknown extension"] = (tmp / "weights.npz", "unsupported checkpoint extension '.npz'")
    wrong_keys = dict(sd)
    wrong_keys.pop([k for k in sorted(sd) if "norm" in k][-1])  # not a preset-detection probe
    wrong_keys["blocks.0.zz_unexpected.weight"] = torch.zeros(2)
    files["wrong keys"] = (_write(wrong_keys, tmp / "wrong_keys", "safetensors"), "missing keys: 1 .*unexpected keys")
    wrong_shape = dict(sd)
    name = next(k for k in sorted(sd) if "norm" in k and sd[k].ndim >= 1)  # no preset-detection probe is a norm
    wrong_shape[name] = torch.zeros(sd[name].shape[0] + 1, *sd[name].shape[1:])
    files["wrong shapes"] = (_write(wrong_shape, tmp / "wrong_shape", "safetensors"), "shape mismatches: 1")
    return files


class _RunsCode:
    """Unpickling this would create a marker file; the reader must refuse before that."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


ERRORS = ("missing", "directory", "empty", "random .pt", "random .safetensors", "truncated .safetensors",
          "unsafe pickle", "non-tensor entries", "unknown extension", "wrong keys", "wrong shapes")


@pytest.mark.parametrize("kind", KINDS)
def test_every_error_names_the_file(tmp_path, weights, kind):
    files = _bad_files(tmp_path, weights[kind])
    assert set(files) == set(ERRORS)
    for problem, (path, pattern) in files.items():
        with pytest.raises(CheckpointError, match=pattern) as exc:
            LOADERS[kind](path)
        assert path.name in str(exc.value), (problem, str(exc.value))
        assert exc.value.path is not None and Path(exc.value.path).name == path.name
        if kind == "imagereward":
            assert isinstance(exc.value, ImageRewardError)
    assert not (tmp_path / "code_ran").exists()


def test_pickle_protocol_warning_does_not_leak(tmp_path, weights):
    """torch warns about non-default pickle protocols; the reader says what matters in its own error."""
    path = tmp_path / "protocol4.pt"
    torch.save(weights["dit"], path, pickle_protocol=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match="protocol4.pt was written with pickle protocol 4"):
            load_wan_dit(path)
        with open(tmp_path / "raw.pt", "wb") as f:
            pickle.dump({"patch_embedding.weight": _RunsCode(tmp_path / "code_ran")}, f, protocol=4)
        with pytest.raises(CheckpointError, match="raw.pt"):
            load_wan_dit(tmp_path / "raw.pt")
    leaked = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert leaked == []
    assert not (tmp_path / "code_ran").exists()


def test_error_carries_the_path(tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError) as exc:
        load_wan_vae(path)
    assert exc.value.path == str(path) and isinstance(exc.value, ValueError)


# ---------------------------------------------------------------------------------------------------------------
# prefixes: one normalisation with a key layout per model
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,prefix", [
    ("dit", "model."), ("dit", "model.diffusion_model."), ("dit", "diffusion_model."), ("dit", "module."),
    ("vae", "first_stage_model."), ("vae", "vae."), ("vae", "model."), ("imagereward", "module."),
])
def test_prefixes(tmp_path, weights, kind, prefix):
    path = _write({prefix + k: v for k, v in weights[kind].items()}, tmp_path / "prefixed", "safetensors")
    assert _equal(LOADERS[kind](path), weights[kind])


def test_full_comfy_checkpoint_holds_dit_and_vae(tmp_path, weights):
    """A full ComfyUI save keeps the DiT and the VAE side by side; each loader takes its own part."""
    sd = {**{f"model.diffusion_model.{k}": v for k, v in weights["dit"].items()},
          **{f"first_stage_model.{k}": v for k, v in weights["vae"].items()}}
    path = _write(sd, tmp_path / "full", "safetensors")
    assert _equal(_load_dit(path), weights["dit"]) and _equal(_load_vae(path), weights["vae"])


def test_ddp_collision_refused(weights):
    sd = dict(weights["imagereward"])
    sd["module.mlp.layers.0.weight"] = sd["mlp.layers.0.weight"]
    with pytest.raises(CheckpointError, match="'mlp.layers.0.weight' appears both with and without the prefix"):
        normalize_prefix(sd, IMAGEREWARD_LAYOUT, "ddp.pt")
    stripped, prefix = normalize_prefix({f"vae.{k}": v for k, v in weights["vae"].items()}, VAE_LAYOUT)
    assert prefix == "vae." and stripped.keys() == weights["vae"].keys()


# ---------------------------------------------------------------------------------------------------------------
# explicit configs and stable keys
# ---------------------------------------------------------------------------------------------------------------
def test_explicit_dit_config_from_fixture_meta(fixtures_dir):
    folder = fixtures_dir / "causal_wan_tiny"
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    cfg = WanDiTConfig.from_mapping(meta["model_config"], name="fixture")
    net, got, rep = load_wan_dit(folder / meta["weights"]["file"], cfg)
    assert got is cfg and rep.preset == "fixture" and rep.num_params == meta["weights"]["num_params"]
    assert isinstance(net, WanDiT) and net.config.num_heads == meta["model_config"]["num_heads"]


def test_explicit_config_for_a_size_without_preset(tmp_path):
    cfg = WanDiTConfig(name="custom", dim=32, ffn_dim=64, num_heads=2, num_layers=1, text_dim=16)
    path = _write(build_random(cfg, seed=1).state_dict(), tmp_path / "custom", "safetensors")
    with pytest.raises(CheckpointError, match="no Wan 2.1 preset matches.*config="):
        load_wan_dit(path)
    net, got, _ = load_wan_dit(path, config=cfg)
    assert got == cfg and sum(p.numel() for p in net.parameters()) == cfg.num_params()
    with pytest.raises(CheckpointError, match="custom.safetensors: does not fit preset 'tiny'"):
        load_wan_dit(path, "tiny")
    with pytest.raises(ValueError, match="needs \\['dim'"):
        WanDiTConfig.from_mapping({"ffn_dim": 2})


def test_vae_explicit_config(tmp_path, weights):
    path = _write(weights["vae"], tmp_path / "vae", "pt-zip")
    assert load_wan_vae(path, "tiny").config.dim == 8
    with pytest.raises(CheckpointError, match="vae.pt.*shape mismatches"):
        load_wan_vae(path, "wan2.1-vae")
    with pytest.raises(CheckpointError, match="vae.pt.*unknown VAE preset"):
        load_wan_vae(path, "nope")


def test_loaders_set_stable_keys(tmp_path, weights):
    dit = _write(weights["dit"], tmp_path / "dit", "safetensors")
    vae = _write(weights["vae"], tmp_path / "vae", "safetensors")
    _, _, rep = load_wan_dit(dit, dtype=torch.bfloat16)
    assert rep.key.startswith(file_identity(dit)) and rep.key.endswith("bfloat16") and str(dit.resolve()) in rep.key
    assert load_wan_vae(vae).key == load_wan_vae(vae).key == f"{file_identity(vae)}|float32"
    before = file_identity(vae)
    _write(weights["vae"], tmp_path / "vae", "safetensors")  # replaced: a new identity (mtime)
    os.utime(vae, ns=(0, 0))
    assert file_identity(vae) != before
    folder = tmp_path / "ir"
    vocab = write_synthetic_vocab(folder / "vocab.txt")
    save_file(weights["imagereward"], str(folder / "ImageReward.safetensors"))
    scorer = load_scorer(folder / "ImageReward.safetensors")
    assert scorer.key == f"{file_identity(folder / 'ImageReward.safetensors')}|{file_identity(vocab)}|float32"
    assert synthetic_tiny_config(vocab) == scorer.cfg


# ---------------------------------------------------------------------------------------------------------------
# wrong Wan models are refused, not run
# ---------------------------------------------------------------------------------------------------------------
def _variant(sd: dict[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """A tiny T2V state dict turned into another Wan model's layout (names and widths as in the real ones)."""
    out = dict(sd)
    pe = sd["patch_embedding.weight"]  # [dim, 16, 1, 2, 2]
    dim = pe.shape[0]
    if kind == "i2v":
        out["patch_embedding.weight"] = torch.zeros(dim, 36, 1, 2, 2)
        out["img_emb.proj.1.weight"] = torch.zeros(dim, 8)
        out["blocks.0.cross_attn.k_img.weight"] = torch.zeros(dim, dim)
    elif kind == "wan2.2-i2v":  # no CLIP branch, only the wider input
        out["patch_embedding.weight"] = torch.zeros(dim, 36, 1, 2, 2)
    elif kind == "vace":
        out["vace_patch_embedding.weight"] = torch.zeros(dim, 96, 1, 2, 2)
        out["vace_blocks.0.before_proj.weight"] = torch.zeros(dim, dim)
    elif kind == "wan2.2-5b":
        out["patch_embedding.weight"] = torch.zeros(dim, 48, 1, 2, 2)
        out["head.head.weight"] = torch.zeros(48 * 4, dim)
        out["head.head.bias"] = torch.zeros(48 * 4)
    elif kind == "camera":
        out["patch_embedding.weight"] = torch.zeros(dim, 32, 1, 2, 2)
        out["control_adapter.conv.weight"] = torch.zeros(dim, 24, 2, 2)
    elif kind == "unknown-extra":
        out["motion_encoder.proj.weight"] = torch.zeros(dim, dim)
    return out


VARIANTS = {
    "i2v": "image-to-video or first-last-frame model.*img_emb",
    "wan2.2-i2v": "image-to-video model \\(36 input channels",
    "vace": "VACE model.*vace_",
    "wan2.2-5b": "Wan 2.2 TI2V-5B",
    "camera": "camera-control model",
    "unknown-extra": "extra parts \\['motion_encoder'\\]",
}


@pytest.mark.parametrize("kind", sorted(VARIANTS))
def test_wrong_wan_files_refused(tmp_path, weights, kind):
    path = _write(_variant(weights["dit"], kind), tmp_path / f"wan_{kind}", "safetensors")
    with pytest.raises(CheckpointError, match=VARIANTS[kind]) as exc:
        load_wan_dit(path)
    msg = str(exc.value)
    assert path.name in msg and "SDVG needs a Wan 2.1 text-to-video DiT" in msg and "Wan 2.2 T2V-A14B" in msg
    with pytest.raises(WrongWanModel):  # the same check on the state dict, shared with the ComfyUI MODEL path
        check_t2v_state_dict(_variant(weights["dit"], kind), "x")


class _TinyWan(torch.nn.Module):
    """A module shaped like ComfyUI's WanModel: the T2V parts of a tiny WanDiT plus optional variant parts."""

    def __init__(self, model_type: str = "t2v", **extra: torch.nn.Module):
        super().__init__()
        net = build_random(PRESETS["tiny"], seed=2)
        for name in T2V_TOP_LEVEL:
            setattr(self, name, getattr(net, name))
        for name, module in extra.items():
            setattr(self, name, module)
        self.model_type, self.in_dim, self.out_dim = model_type, net.config.in_dim, net.config.out_dim


def _check_module(net: _TinyWan, config_class: str | None = None) -> None:
    check_t2v([k for k, _ in net.named_parameters()], net.in_dim, net.out_dim, f"the MODEL input ({type(net).__name__})",
              model_type=net.model_type, config_class=config_class)


def test_wrong_wan_modules_refused():
    _check_module(_TinyWan())  # plain T2V passes
    _check_module(_TinyWan(), "WAN21_T2V")
    vace = _TinyWan(vace_blocks=torch.nn.ModuleList([torch.nn.Linear(4, 4)]),
                    vace_patch_embedding=torch.nn.Conv3d(96, 4, (1, 2, 2)))
    with pytest.raises(WrongWanModel, match=r"the MODEL input \(_TinyWan\) is a VACE model.*vace_") as exc:
        _check_module(vace)  # ComfyUI's VACE network reports model_type 't2v': the parameters give it away
    assert "SDVG needs a Wan 2.1 text-to-video DiT" in str(exc.value)
    with pytest.raises(WrongWanModel, match="ComfyUI model type WAN21_Vace"):
        _check_module(_TinyWan(), "WAN21_Vace")
    with pytest.raises(WrongWanModel, match="image-to-video"):
        _check_module(_TinyWan("i2v", img_emb=torch.nn.Linear(4, 4)))
    with pytest.raises(WrongWanModel, match="Wan 'i2v' model"):
        _check_module(_TinyWan("i2v"))
    with pytest.raises(WrongWanModel, match="ComfyUI model type WAN22_T2V"):  # Wan 2.2 TI2V-5B in ComfyUI
        _check_module(_TinyWan(), "WAN22_T2V")
    wide = _TinyWan()
    wide.in_dim = 48
    with pytest.raises(WrongWanModel, match="48 input channels"):
        _check_module(wide)


def test_fixture_t2v_checkpoint_passes(fixtures_dir):
    """The golden Self-Forcing-shaped fixture is plain T2V: the check must not refuse real T2V files."""
    require_shared("fixtures")
    net, cfg, _ = load_wan_dit(fixtures_dir / "causal_wan_tiny" / "weights.safetensors")
    assert cfg.name == "tiny" and isinstance(net, WanDiT)


def test_shapes_come_from_the_one_reader_without_reading_tensor_bytes(tmp_path, monkeypatch):
    """`read_shapes` (io/tensor_file.py) gives every tensor's shape of a .safetensors header and of a memory-mapped torch
    zip archive, unwrapped as read_state_dict unwraps; prompt_width.py has no file reader of its own."""
    import ast

    import safetensors

    from sdvg_core.io import prompt_width
    from sdvg_core.io.tensor_file import read_shapes

    sd = {"model.text_embedding.0.weight": torch.zeros(6, 5), "b": torch.zeros(3)}
    save_file(sd, str(tmp_path / "a.safetensors"))
    torch.save({"generator_ema": sd, "generator": {"x": torch.zeros(2, 2)}}, tmp_path / "b.pt")
    monkeypatch.setattr(safetensors.safe_open, "get_tensor", lambda *a: pytest.fail("a tensor was read"), raising=False)
    want = {"model.text_embedding.0.weight": (6, 5), "b": (3,)}
    assert read_shapes(tmp_path / "a.safetensors") == want == read_shapes(tmp_path / "b.pt")
    assert read_shapes(tmp_path / "b.pt", pt_entry="generator") == {"x": (2, 2)}
    (tmp_path / "c.pt").write_bytes(b"not a checkpoint")
    assert read_shapes(tmp_path / "c.pt") is None and read_shapes(tmp_path / "d.bin") is None
    assert prompt_width.text_width(tmp_path / "a.safetensors") == 5
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(ast.parse(Path(prompt_width.__file__).read_text())) if isinstance(n, ast.Call)}
    assert not calls & {"load", "safe_open", "unpack", "is_zipfile"}, calls & {"load", "safe_open", "unpack"}
