"""What a new user hits with the demo CLI: checks that come before loading (embeddings width read from
the checkpoint headers, an output folder that cannot be written, --blocks past the node's bound), Ctrl-C that keeps
a playable video and the report of the committed blocks, a fresh dated folder per run, a report naming every
prompt of a schedule."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from conftest import wait_for
from sdvg_core import save_embeddings
from sdvg_core.demo.cli import main
from sdvg_core.io.prompt_width import text_width

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--width", "48", "--height", "32", "--quiet"]
SIGINT_AFTER_BLOCK = 2  # Ctrl-C once this block has committed
RUN_TIMEOUT = 300  # seconds: generous for a tiny run on a busy 2-core machine


def _no_loading(monkeypatch):
    """Any model load fails the test: the checks must come first."""
    import sdvg_core.demo.cli as cli

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "load_model_files", boom)
    monkeypatch.setattr(cli, "tiny_models", boom)


def _tiny_dit_files(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny target as .safetensors (prefixed keys) and a tiny drafter as a Self-Forcing-style .pt (zip)."""
    from safetensors.torch import save_file

    from sdvg_core.models.wan import build_random
    from sdvg_core.models.wan_config import PRESETS

    target, drafter = tmp_path / "target.safetensors", tmp_path / "drafter.pt"
    save_file({f"model.{k}": v.contiguous() for k, v in build_random(PRESETS["tiny-target"], seed=1).state_dict().items()},
              str(target))
    sd = {f"model.{k}": v for k, v in build_random(PRESETS["tiny-drafter"], seed=2).state_dict().items()}
    torch.save({"generator": sd, "generator_ema": sd}, drafter)
    return target, drafter


# ------------------------------------------------------------------------------------------ before loading
def test_embeddings_of_the_wrong_width_are_refused_before_the_tiny_models_load(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    emb = tmp_path / "narrow.safetensors"
    save_embeddings(emb, "narrow", torch.zeros(1, 10, 7))
    assert main(["--embeddings", str(emb), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "nothing was loaded" in err
    assert f"--embeddings {emb}: prompt embeddings 7 wide, but the tiny target (tiny-target) takes 32-wide" in err
    assert not (tmp_path / "o").exists()


def test_the_width_comes_from_the_checkpoint_headers_without_loading(tmp_path, capsys, monkeypatch):
    """Real-model mode: the target's .safetensors header and the drafter's .pt archive say 32; the embeddings are 7."""
    target, drafter = _tiny_dit_files(tmp_path)
    assert text_width(target) == 32 and text_width(drafter) == 32 and text_width(drafter, "generator") == 32
    legacy = tmp_path / "legacy.pt"
    torch.save({"text_embedding.0.weight": torch.zeros(2, 5)}, legacy, _use_new_zipfile_serialization=False)
    assert text_width(legacy) is None  # an old non-zip pickle: unknown without loading it (the engine checks later)
    _no_loading(monkeypatch)
    emb = tmp_path / "narrow.safetensors"
    save_embeddings(emb, "narrow", torch.zeros(1, 10, 7))
    vae = tmp_path / "vae.safetensors"
    vae.write_bytes(b"x")
    rc = main(["--target", str(target), "--drafter", str(drafter), "--vae", str(vae), "--policy", "accept-all",
               "--embeddings", str(emb), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"7 wide, but the target {target} takes 32-wide" in err
    assert f"7 wide, but the drafter {drafter} takes 32-wide" in err


def test_an_output_folder_that_cannot_be_written_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    from test_cli_args import unwritable_folder

    _no_loading(monkeypatch)
    with unwritable_folder(tmp_path) as out:
        assert main(["--out", str(out)]) == 2
        assert f"--out {out}: cannot write there" in capsys.readouterr().err


def test_blocks_past_the_nodes_bound_are_refused(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    assert main(["--blocks", "10001", "--out", str(tmp_path / "o")]) == 2
    assert "--blocks 10001 is more than 10,000" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ no silent replace
@pytest.mark.slow
def test_each_run_gets_a_fresh_dated_folder_and_an_explicit_one_is_not_replaced(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--blocks", "2", *SMALL]) == 0
    assert main(["--blocks", "2", *SMALL]) == 0
    runs = sorted((tmp_path / "out" / "demo").iterdir())
    assert len(runs) == 2 and all((r / "sdvg.mp4").is_file() and (r / "report.json").is_file() for r in runs)
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?", runs[0].name) and re.fullmatch(r"\d{8}-\d{6}(-\d+)?", runs[1].name)
    first = runs[0] / "report.json"
    before = first.read_bytes()
    capsys.readouterr()
    assert main(["--blocks", "2", "--out", str(runs[0]), *SMALL]) == 2  # an earlier run's outputs are there
    err = capsys.readouterr().err
    assert "holds an earlier run's sdvg.mp4, report.json, report.png" in err and "--overwrite" in err
    assert first.read_bytes() == before
    assert main(["--blocks", "3", "--out", str(runs[0]), "--overwrite", *SMALL]) == 0
    assert json.loads(first.read_text())["num_blocks"] == 3


# ------------------------------------------------------------------------------------------ report
@pytest.mark.slow
def test_the_report_names_every_prompt_of_a_schedule(tmp_path):
    sched = tmp_path / "story.txt"
    sched.write_text("0: a red fox in the snow\n2: the fox runs into a forest\n")
    assert main(["--prompt-schedule", str(sched), "--blocks", "3", "--out", str(tmp_path / "o"), *SMALL]) == 0
    meta = json.loads((tmp_path / "o" / "report.json").read_text())["meta"]
    assert meta["prompt"] == "0: a red fox in the snow | 2: the fox runs into a forest"


# ------------------------------------------------------------------------------------------ Ctrl-C
def _frames_in(video: Path) -> int:
    import imageio.v2 as imageio

    with imageio.get_reader(str(video)) as r:
        return sum(1 for _ in r)


def sigint_ignored_at_start() -> None:
    """Start the child as a script's background job starts (SIGINT ignored, which Python then keeps): the command
    must still take Ctrl-C, so the test does not depend on how it was launched."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stopped_mid_run(tmp_path: Path, send, extra: list[str] = (), blocks: int = 200) -> tuple[int, str, str, Path]:
    """Run the demo as a child, send it a stop signal (`send(proc)`) once block SIGINT_AFTER_BLOCK has committed,
    and return (exit status, stdout, stderr, output folder) as soon as it has exited."""
    pytest.importorskip("imageio_ffmpeg", reason="the mp4 writer needs imageio-ffmpeg")
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "sdvg_core.demo", "--blocks", str(blocks), "--width", "48", "--height", "32",
           "--out", str(out), *extra]  # the progress bar (stderr) says when a block has committed
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_ignored_at_start)
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), b"")), daemon=True)
    reader.start()
    committed = re.compile(rb"block (\d+) -> ")
    wait_for(proc, lambda: any(int(m) >= SIGINT_AFTER_BLOCK for m in committed.findall(b"".join(err))),
             f"commit of block {SIGINT_AFTER_BLOCK}", RUN_TIMEOUT, lambda: b"".join(err).decode())
    send(proc)
    stdout = proc.stdout.read().decode()
    rc = proc.wait(timeout=RUN_TIMEOUT)
    reader.join(timeout=10)
    return rc, stdout, b"".join(err).decode(), out


@pytest.mark.slow
def test_ctrl_c_keeps_the_committed_blocks_playable_with_their_report(tmp_path):
    """SIGINT to the demo's process group (what a terminal's Ctrl-C sends) mid-run: exit 130, one line naming the
    block and the video, no traceback; the mp4 holds exactly the committed blocks and plays; the report and plot
    cover those blocks and say where the run stopped."""
    rc, stdout, text, out = _stopped_mid_run(tmp_path, lambda proc: os.killpg(proc.pid, signal.SIGINT))
    assert rc == 130
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    m = re.search(r"interrupted at block (\d+) of 200: (\d+) block\(s\) committed and written to (\S+) \((\d+) frames, "
                  r"playable\)", text)
    assert m, text[-2000:]
    at, k, video, frames = int(m[1]), int(m[2]), Path(m[3]), int(m[4])
    assert at == k >= SIGINT_AFTER_BLOCK + 1 and (video if video.is_absolute() else tmp_path / video) == out / "sdvg.mp4"
    assert frames == 1 + 4 * (3 * k - 1)  # Wan VAE: T latent frames -> 1 + 4 (T - 1) pixel frames
    assert _frames_in(out / "sdvg.mp4") == frames  # the file is closed and plays to its end
    report = json.loads((out / "report.json").read_text())
    assert report["num_blocks"] == k and len(report["blocks"]) == k
    assert report["meta"]["interrupted_at_block"] == str(at) and report["meta"]["blocks_requested"] == "200"
    assert (out / "report.png").is_file() and "acceptance blocks 1..N-1" in stdout


@pytest.mark.slow
def test_sigterm_during_video_to_video_is_handled_as_ctrl_c_and_the_file_is_whole_when_the_process_ends(tmp_path):
    """SIGTERM to the process alone (what kill, timeout, systemd and docker stop send) during a video-to-video run:
    one message, the report of the committed blocks, exit 143, and by the time the process has exited the mp4 is
    complete (the writer's ffmpeg child was waited for): read right after `wait`, it holds every committed frame."""
    from test_pixels_cli import write_video

    clip = write_video(tmp_path / "clip.mp4", 9 + 12 * 39)  # 40 blocks of input: the run is stopped long before
    rc, stdout, text, out = _stopped_mid_run(tmp_path, lambda proc: os.kill(proc.pid, signal.SIGTERM),
                                             ["--input-video", str(clip)], blocks=40)
    frames_now = _frames_in(out / "sdvg.mp4")  # no wait after the exit: a script copying the file gets it whole
    assert rc == 143, text[-3000:]
    assert "Traceback" not in text and text.count("terminated (SIGTERM) at block") == 1, text[-3000:]
    m = re.search(r"terminated \(SIGTERM\) at block (\d+) of 40: (\d+) block\(s\) committed and written to \S+ "
                  r"\((\d+) frames, playable\)", text)
    assert m, text[-2000:]
    k, frames = int(m[2]), int(m[3])
    assert k >= SIGINT_AFTER_BLOCK + 1 and frames == 1 + 4 * (3 * k - 1) == frames_now  # v2v: block 0 is 9 frames
    report = json.loads((out / "report.json").read_text())
    assert report["num_blocks"] == k and report["pixels"]["mode"] == "video_to_video"
    assert report["meta"]["interrupted_at_block"] == m[1] and (out / "report.png").is_file()
    assert "acceptance blocks 1..N-1" in stdout


def test_the_hang_guard_kills_a_stuck_child_and_reports_one_that_ended():
    """conftest.wait_for: a child that never gets ready is killed and the test fails as hung; a child that ends first
    fails with its output; a ready one passes."""
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(pytest.fail.Exception, match="hung: no signal within 0.5 s"):
        wait_for(stuck, lambda: False, "signal", 0.5)
    assert stuck.wait(timeout=10) != 0  # killed, not left running
    ended = subprocess.Popen([sys.executable, "-c", "print('bye')"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception, match="ended before signal:\nbye"):
        wait_for(ended, lambda: False, "signal", 60, lambda: ended.stdout.read())
    ready = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    wait_for(ready, lambda: True, "signal", 60)
    ready.kill()
    ready.wait()
