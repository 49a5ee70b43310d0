"""The README's run command: the CLI on the tiny default, and its errors for missing real files."""
from __future__ import annotations

import json

import pytest
import torch

from sdvg_core.demo.cli import main
from sdvg_core.io.video import write_video


def test_demo_tiny_writes_video_and_report(tmp_path, capsys):
    rc = main(["--out", str(tmp_path), "--blocks", "3", "--format", "webp", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "acceptance blocks 1..N-1" in out and "counted speedup" in out
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["num_blocks"] == 3 and len(rep["blocks"]) == 3
    assert rep["blocks"][0]["producer"] == "target" and rep["blocks"][0]["decision"] == "forced"
    assert rep["meta"]["frames"] == str(1 + 4 * (3 * 3 - 1))
    from PIL import Image

    with Image.open(tmp_path / "sdvg.webp") as im:
        assert im.n_frames == 33 and im.size == (96, 64)


def test_demo_real_mode_lists_every_missing_file(tmp_path):
    with pytest.raises(SystemExit, match=r"needs --vae, --drafter, --reward, --embeddings or --umt5"):
        main(["--target", str(tmp_path / "t.safetensors"), "--out", str(tmp_path)])


def test_demo_real_mode_names_the_missing_file(tmp_path, capsys):
    emb = tmp_path / "p.safetensors"
    from sdvg_core.io.text import save_embeddings

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
