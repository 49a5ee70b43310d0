"""The README's run command: the CLI on the tiny default, and its input checks (all before any model loads)."""
from __future__ import annotations

import json

import pytest
import torch

from sdvg_core.demo.cli import main
from sdvg_core import write_video


@pytest.mark.slow
def test_demo_tiny_writes_video_and_report(tmp_path, capsys):
    rc = main(["--out", str(tmp_path), "--blocks", "3", "--format", "webp", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "acceptance blocks 1..N-1" in out and "counted speedup" in out
    assert "random weights" in out  # the README and the CLI say the tiny video is noise
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["num_blocks"] == 3 and len(rep["blocks"]) == 3
    assert rep["tau"] == -0.8  # the tiny demo's tau, as a number (docs/report-json.md)
    assert rep["blocks"][0]["producer"] == "target" and rep["blocks"][0]["decision"] == "forced"
    assert rep["meta"]["frames"] == str(1 + 4 * (3 * 3 - 1))
    from PIL import Image

    with Image.open(tmp_path / "sdvg.webp") as im:
        assert im.n_frames == 33 and im.size == (96, 64)
    with Image.open(tmp_path / "report.png") as im:  # the plot the Finish node draws, next to the video
        assert im.format == "PNG" and im.size[0] > 0


def _no_loading(monkeypatch):
    """Make any model load fail the test: the checks must come first."""
    import sdvg_core.demo.cli as cli

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "load_model_files", boom)
    monkeypatch.setattr(cli, "tiny_models", boom)


def test_demo_real_mode_lists_every_missing_file(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    rc = main(["--target", str(tmp_path / "t.safetensors"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing was loaded" in err
    for flag in ("--vae is missing", "--drafter is missing", "--reward is missing", "--embeddings or --umt5 is missing",
                 f"--target {tmp_path / 't.safetensors'}: file not found"):
        assert flag in err, (flag, err)


def test_demo_names_every_bad_file_before_loading(tmp_path, capsys, monkeypatch):
    """A present target with a missing VAE used to be reported only after the target and drafter loaded."""
    _no_loading(monkeypatch)
    target = tmp_path / "target.safetensors"
    target.write_bytes(b"x")
    drafter = tmp_path / "drafter_dir"
    drafter.mkdir()
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    reward = tmp_path / "ImageReward.pt"
    reward.write_bytes(b"x")  # no vocab.txt next to it
    rc = main(["--target", str(target), "--drafter", str(drafter), "--vae", str(tmp_path / "vae.pth"),
               "--reward", str(reward), "--embeddings", str(broken), "--umt5", str(tmp_path), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"--vae {tmp_path / 'vae.pth'}: file not found" in err
    assert f"--drafter {drafter}: is a folder" in err
    assert "--embeddings:" in err and "broken.safetensors" in err
    assert "--vocab:" in err and "vocab.txt" in err
    assert "--umt5" in err and "config.json" in err
    assert str(target) not in err  # the good file is not blamed


@pytest.mark.parametrize("args, message", [
    (["--blocks", "0"], "--blocks 0 must be >= 1"),
    (["--width", "0"], "--width 0 must be >= 1"),
    (["--height", "-16"], "--height -16 must be >= 1"),
    (["--width", "100"], "--width 100 is not a multiple of 16"),
    (["--tau", "nan"], "--tau nan: policy 'sdvg': tau must be a number"),
    (["--policy", "random:p=1.5"], "accept_rate must be in [0, 1], got 1.5"),
    (["--policy", "stride:k=0"], "stride k must be an integer >= 1"),
    (["--policy", "sdvg:tau=-1", "--tau", "-2"], "states tau -1 and tau -2 is also given"),
    (["--drafter-recipe", "longlive:window=2"], "--drafter-recipe longlive:window=2: LongLive window of 2 latent "
                                                "frames is smaller than a block (3 frames)"),
    (["--recipe", "longlive:sink=12"], "cannot hold its sink (12) plus a block (3)"),
])
def test_demo_refuses_bad_numbers(tmp_path, capsys, monkeypatch, args, message):
    _no_loading(monkeypatch)
    assert main(args + ["--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_demo_usage_errors_exit_2(capsys):
    assert main(["--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["--blocks", "two"]) == 2
    assert main(["--drafter-recipe", "longlive:windw=6"]) == 2
    assert "has no parameter 'windw'; it has window (default 12), sink (default 3)" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_runs_a_recipe_with_its_parameters(tmp_path):
    """--drafter-recipe longlive:window=6,sink=0 runs that ring (its 6-frame window fills at block 2) and the
    report names it so."""
    assert main(["--out", str(tmp_path), "--blocks", "3", "--quiet", "--drafter-recipe", "longlive:window=6,sink=0"]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["recipe"] == "drafter longlive:window=6,sink=0 / target krea"


def test_demo_real_mode_names_the_missing_file(tmp_path, capsys):
    emb = tmp_path / "p.safetensors"
    from sdvg_core import save_embeddings

    save_embeddings(emb, "p", torch.zeros(1, 4, 32))
    rc = main(["--policy", "target-only", "--target", str(tmp_path / "nope.safetensors"), "--vae", str(tmp_path / "v.pth"),
               "--embeddings", str(emb), "--out", str(tmp_path)])
    assert rc == 2 and "not found" in capsys.readouterr().err


def test_write_mp4(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    p = write_video(torch.rand(5, 32, 48, 3), tmp_path / "v.mp4")
    assert p.stat().st_size > 0
    with pytest.raises(ValueError, match="unsupported video extension"):
        write_video(torch.rand(2, 8, 8, 3), tmp_path / "v.avi")


@pytest.mark.slow
def test_demo_real_mode_runs_on_model_files(tmp_path):
    """Real-file mode end to end on tiny files: loaders give every model a stable key the engine accepts."""
    from safetensors.torch import save_file

    from sdvg_core.demo.tiny import random_vae
    from sdvg_core import save_embeddings
    from sdvg_core.io.text import demo_embeddings
    from sdvg_core.models.wan import build_random
    from sdvg_core.models.wan_config import PRESETS

    cfg = PRESETS["tiny-target"]
    save_file({f"model.{k}": v.contiguous() for k, v in build_random(cfg, seed=1).state_dict().items()},
              str(tmp_path / "target.safetensors"))
    save_file({k: v.contiguous() for k, v in random_vae(seed=2).state_dict().items()}, str(tmp_path / "vae.safetensors"))
    save_embeddings(tmp_path / "prompt.safetensors", "a prompt", demo_embeddings("a prompt", cfg.text_dim))
    rc = main(["--policy", "target-only", "--target", str(tmp_path / "target.safetensors"),
               "--vae", str(tmp_path / "vae.safetensors"), "--embeddings", str(tmp_path / "prompt.safetensors"),
               "--width", "48", "--height", "32", "--blocks", "2", "--out", str(tmp_path / "out")])
    assert rc == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [b["producer"] for b in report["blocks"]] == ["target", "target"]
