"""Checkpoint loading: real key layouts round-trip; every bad file gets one clear error."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from sdvg_core.models.wan_config import PRESETS
from sdvg_core import CheckpointError, load_drafter, load_model_files, load_wan_dit
from sdvg_core.io.checkpoint import save_state_dict
from sdvg_core.io.drafters import DrafterError, drafter_problems
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


# ---------------------------------------------------------------------------------------------------------------
# drafter kinds (io/drafters.py): Causal Forcing chunk-wise, LongLive, frame-wise refused
# ---------------------------------------------------------------------------------------------------------------
def _networks(tmp_path, folder: str, name: str, entries: dict[str, dict], prefix: str = "model.") -> Path:
    path = tmp_path / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({e: {prefix + k: v for k, v in sd.items()} for e, sd in entries.items()}, path)
    return path


def test_causal_forcing_chunkwise_reads_generator_with_fsdp_names(tmp_path, tiny_sd):
    """Causal Forcing's inference.py reads `generator` (no --use_ema for the chunk-wise model) and loads keys
    saved as model._fsdp_wrapped_module.<wan key>; Self-Forcing's kind keeps reading generator_ema."""
    ema = build_random(PRESETS["tiny"], seed=12).state_dict()
    path = _networks(tmp_path, "chunkwise", "causal_forcing.pt", {"generator": tiny_sd, "generator_ema": ema},
                     prefix="model._fsdp_wrapped_module.")
    net, _, rep = load_drafter(path, "causal_forcing")
    assert rep.entry == "generator" and _same(net, tiny_sd)
    assert "FSDP names removed" in rep.describe() and "kind causal_forcing" in rep.describe()
    net, _, rep = load_drafter(path)  # the default kind: Self-Forcing
    assert rep.entry == "generator_ema" and _same(net, ema)
    net, _, rep = load_drafter(path, "causal_forcing", pt_entry="generator_ema")
    assert rep.entry == "generator_ema" and _same(net, ema)


def test_fsdp_names_anywhere_and_mixed_files(tmp_path, tiny_sd):
    inner = {("model." + k).replace("blocks.1.", "blocks.1._fsdp_wrapped_module."): v for k, v in tiny_sd.items()}
    path = tmp_path / "inner.safetensors"
    save_state_dict(inner, path)
    net, _, _ = load_wan_dit(path)
    assert _same(net, tiny_sd)
    mixed = dict(inner, **{"model.blocks.1.ffn.0.weight": tiny_sd["blocks.1.ffn.0.weight"].clone()})
    save_state_dict(mixed, path)
    with pytest.raises(CheckpointError, match="both with and without the training wrapper names"):
        load_wan_dit(path)


@pytest.mark.parametrize("folder, name, kind", [
    ("framewise", "causal_forcing.pt", "causal_forcing"),
    ("causal-forcing++", "framewise-2step.pt", "causal_forcing"),
    ("causal-forcing++", "framewise-1step.pt", None),
    ("chunkwise", "causal_forcing.pt", "causal_forcing_framewise"),
])
def test_frame_wise_causal_forcing_is_refused_before_reading(tmp_path, folder, name, kind):
    """By the stated kind or, as a safety net, by the published path; the file is never opened (it need not exist)."""
    path = tmp_path / folder / name
    with pytest.raises(DrafterError, match=r"denoise 1 latent frame per block.*drafts 3-frame blocks.*"
                                           r"chunkwise/causal_forcing.pt.*SDVG Sampler \(AR video\).*"
                                           r"num_frame_per_block 1"):
        load_drafter(path, kind)
    assert drafter_problems(path, kind)


def test_causal_forcing_file_without_its_entry_says_what_to_do(tmp_path, tiny_sd):
    path = _networks(tmp_path, "models", "causal_forcing.pt", {"generator_ema": tiny_sd})
    with pytest.raises(DrafterError, match=r"no 'generator' entry.*causal_forcing files are read from 'generator'.*"
                                           r"frame-wise files.*--use_ema.*cannot be used"):
        load_drafter(path, "causal_forcing")


def test_longlive_model_entry_and_lora_file_as_a_model(tmp_path, tiny_sd):
    """LongLive's loader falls back to entry `model`; a LoRA file given as the network is named as a LoRA."""
    path = _networks(tmp_path, "models", "base.pt", {"model": tiny_sd})
    net, _, rep = load_wan_dit(path)
    assert rep.entry == "model" and _same(net, tiny_sd)
    lora = tmp_path / "lora.pt"
    torch.save({"generator_lora": {"base_model.model.blocks.0.self_attn.q.lora_A.weight": torch.zeros(4, 64)},
                "step": 3}, lora)
    with pytest.raises(CheckpointError, match="holds a LoRA .*generator_lora.*lora.pt goes with longlive_base.pt"):
        load_wan_dit(lora)


def test_model_files_longlive_drafter(tmp_path, tiny_sd):
    """The loader of the demo CLI and sdvg_eval: kind, LoRA and default recipe reach the model set; a drafter
    problem is raised before the target is read (here the target does not even exist)."""
    from test_lora import hand_lora

    from sdvg_core.demo.tiny import random_vae

    base_net = build_random(PRESETS["tiny"], seed=11)
    base = _networks(tmp_path, "models", "longlive_base.pt", {"generator": tiny_sd})
    lora = tmp_path / "models" / "lora.pt"
    torch.save({"generator_lora": hand_lora(base_net, rank=256)}, lora)
    target = tmp_path / "target.safetensors"
    save_state_dict(build_random(PRESETS["tiny-target"], seed=2).state_dict(), target)
    vae = tmp_path / "vae.safetensors"
    save_state_dict(random_vae(3).state_dict(), vae)
    m = load_model_files(target=str(target), vae=str(vae), drafter=str(base), drafter_kind="longlive",
                         drafter_lora=str(lora))
    assert (m.drafter_kind, m.drafter_recipe) == ("longlive", "longlive")
    assert "|lora:" in m.drafter.key and "LoRA lora.pt merged (20 layers, rank 256, alpha 256" in m.notes[1]
    plain = load_model_files(target=str(target), vae=str(vae), drafter=str(base), drafter_kind="causal_forcing")
    assert (plain.drafter_kind, plain.drafter_recipe) == ("causal_forcing", "self_forcing")
    assert plain.drafter.key != m.drafter.key
    with pytest.raises(DrafterError, match="needs its LoRA"):
        load_model_files(target=str(tmp_path / "missing.safetensors"), vae=str(vae), drafter=str(base),
                         drafter_kind="longlive")


def test_demo_cli_names_drafter_problems_before_loading(tmp_path, capsys):
    from sdvg_core.demo.cli import main

    framewise = tmp_path / "framewise" / "causal_forcing.pt"
    framewise.parent.mkdir()
    framewise.write_bytes(b"x")
    rc = main(["--drafter", str(framewise), "--drafter-kind", "causal_forcing", "--target", str(framewise),
               "--vae", str(framewise), "--policy", "draft-only", "--embeddings", str(framewise),
               "--drafter-lora", str(tmp_path / "no_lora.pt")])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing was loaded" in err
    assert "names a frame-wise model" in err and "--drafter-lora" in err and "no_lora.pt: file not found" in err
    rc = main(["--drafter-lora", str(framewise), "--drafter-kind", "longlive"])  # tiny mode: no --drafter
    err = capsys.readouterr().err
    assert rc == 2 and "--drafter-lora, --drafter-kind given without --drafter" in err
    rc = main(["--drafter", str(framewise.parent.parent / "longlive_base.pt"), "--drafter-kind", "longlive",
               "--policy", "draft-only"])
    assert rc == 2 and "needs its LoRA" in capsys.readouterr().err
