"""Checkpoint loading: real key layouts round-trip; every bad file gets one clear error."""
from __future__ import annotations

import os
import pickle

import pytest
import torch

from sdvg_core.models.wan_config import PRESETS
from sdvg_core.io.checkpoint import CheckpointError, load_wan_dit, save_state_dict
from sdvg_core.models.wan import build_random


@pytest.fixture(scope="module")
def tiny_sd():
    return build_random(PRESETS["tiny"], seed=11).state_dict()


def _same(net, sd) -> bool:
    own = net.state_dict()
    return all(torch.equal(own[k], sd[k].to(own[k].dtype)) for k in sd)


@pytest.mark.parametrize("prefix", ["", "model.", "diffusion_model.", "model.diffusion_model."])
def test_safetensors_round_trip_with_prefixes(tmp_path, tiny_sd, prefix):
    path = tmp_path / "wan.safetensors"
    save_state_dict({prefix + k: v for k, v in tiny_sd.items()}, path)
    net, cfg, rep = load_wan_dit(path)
    assert cfg.name == "tiny" and rep.stripped_prefix == prefix and rep.entry is None
    assert _same(net, tiny_sd)
    assert rep.num_tensors == len(tiny_sd)


def test_self_forcing_pt_entries(tmp_path, tiny_sd):
    """Self-Forcing's .pt holds `generator` and `generator_ema` with a `model.` prefix; default is the EMA."""
    other = build_random(PRESETS["tiny"], seed=12).state_dict()
    path = tmp_path / "self_forcing_dmd.pt"
    torch.save({"generator": {"model." + k: v for k, v in other.items()},
                "generator_ema": {"model." + k: v for k, v in tiny_sd.items()},
                "critic": {"model.x": torch.zeros(1)}}, path)
    net, _, rep = load_wan_dit(path)
    assert rep.entry == "generator_ema" and _same(net, tiny_sd)
    assert "generator_ema" in rep.describe()
    net, _, rep = load_wan_dit(path, pt_entry="generator")
    assert rep.entry == "generator" and _same(net, other)
    with pytest.raises(CheckpointError, match="no 'nonexistent' entry"):
        load_wan_dit(path, pt_entry="nonexistent")


def test_dtype_cast(tmp_path, tiny_sd):
    path = tmp_path / "wan.safetensors"
    save_state_dict(tiny_sd, path)
    net, _, rep = load_wan_dit(path, dtype=torch.bfloat16)
    assert next(net.parameters()).dtype == torch.bfloat16 and rep.dtype == "bfloat16"


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not found: .*nope.safetensors"):
        load_wan_dit(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="is a directory"):
        load_wan_dit(tmp_path)


def test_truncated_files(tmp_path, tiny_sd):
    st = tmp_path / "cut.safetensors"
    save_state_dict(tiny_sd, st)
    st.write_bytes(st.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"cut.safetensors.*not a readable checkpoint \(corrupt or truncated\)"):
        load_wan_dit(st)
    pt = tmp_path / "cut.pt"
    torch.save(tiny_sd, pt)
    pt.write_bytes(pt.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"cut.pt.*not a readable checkpoint \(corrupt or truncated\)"):
        load_wan_dit(pt)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/sdvg_pwned_marker",))


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = "/tmp/sdvg_pwned_marker"
    if os.path.exists(marker):
        os.remove(marker)
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"patch_embedding.weight": _Evil()}, f, protocol=2)  # the protocol torch's reader accepts
    with pytest.raises(CheckpointError, match="evil.pt was refused as unsafe.*run code.*safetensors"):
        load_wan_dit(path)
    torch.save({"patch_embedding.weight": _Evil()}, path)  # the same payload in torch's zip format
    with pytest.raises(CheckpointError, match="evil.pt was refused as unsafe.*posix.system"):
        load_wan_dit(path)
    assert not os.path.exists(marker)


def test_unknown_keys_missing_keys_and_wrong_shapes(tmp_path, tiny_sd):
    extra = dict(tiny_sd, **{"head.extra.weight": torch.zeros(2), "blocks.0.extra.weight": torch.zeros(2)})
    path = tmp_path / "extra.safetensors"
    save_state_dict(extra, path)
    with pytest.raises(CheckpointError) as e:
        load_wan_dit(path)
    assert "extra.safetensors" in str(e.value) and "preset 'tiny'" in str(e.value)
    assert "unexpected keys: 2 (blocks.0.extra.weight, head.extra.weight)" in str(e.value)

    missing = {k: v for k, v in tiny_sd.items() if not k.startswith("blocks.1.cross_attn")}
    save_state_dict(missing, path)
    with pytest.raises(CheckpointError, match=r"missing keys: 10 \(blocks\.1\.cross_attn\.k\.bias, .*, \.\.\.\)"):
        load_wan_dit(path)

    wrong = dict(tiny_sd)
    wrong["blocks.0.self_attn.q.weight"] = torch.zeros(64, 63)
    save_state_dict(wrong, path)
    with pytest.raises(CheckpointError, match=r"shape mismatches: 1 \(blocks\.0\.self_attn\.q\.weight \(64, 63\) != \(64, 64\)"):
        load_wan_dit(path)

    odd = dict(tiny_sd)
    odd["patch_embedding.weight"] = torch.zeros(96, 16, 1, 2, 2)
    save_state_dict(odd, path)
    with pytest.raises(CheckpointError, match="no Wan 2.1 preset matches.*'dim': 96"):
        load_wan_dit(path)


def test_not_a_wan_checkpoint(tmp_path):
    path = tmp_path / "vae.safetensors"
    save_state_dict({"decoder.conv1.weight": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a Wan 2.1 DiT state dict"):
        load_wan_dit(path)
    bad = tmp_path / "weights.npz"
    bad.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="unsupported checkpoint extension"):
        load_wan_dit(bad)
