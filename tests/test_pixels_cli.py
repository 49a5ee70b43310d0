"""Pixels in from the demo CLI: --start-image, --extend, --input-video --strength refused in
preflight (exit 2, one message, no model loaded) when unusable, and each mode run end to end on the tiny default,
its video beginning with the given frames and its report naming the mode."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sdvg_core.demo.cli import main

SMALL = ["--width", "48", "--height", "32", "--quiet"]


def _no_loading(monkeypatch):
    import sdvg_core.demo.cli as cli

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "load_model_files", boom)
    monkeypatch.setattr(cli, "tiny_models", boom)


def write_image(path: Path, h: int = 32, w: int = 48, seed: int = 0) -> Path:
    from PIL import Image

    rgb = (np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(path)
    return path


def write_video(path: Path, frames: int, h: int = 32, w: int = 48, seed: int = 0, fps: int = 16,
                options: dict | None = None) -> Path:
    av = pytest.importorskip("av")
    rng = np.random.default_rng(seed)
    with av.open(str(path), "w", options=options or {}) as c:
        s = c.add_stream("mpeg4", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for _ in range(frames):
            img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def _frames_in(video: Path) -> int:
    import av

    with av.open(str(video)) as c:
        return sum(1 for _ in c.decode(video=0))


def _refused(capsys, args: list[str], expect: str) -> str:
    assert main([*args, *SMALL]) == 2
    err = capsys.readouterr().err
    assert "1 problem(s)" in err and "nothing was loaded" in err, err
    assert expect in err, err
    return err


def test_unusable_pixel_input_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)
    out = ["--out", str(tmp_path / "o")]
    not_image = tmp_path / "notes.png"
    not_image.write_text("not an image")
    _refused(capsys, [*out, "--start-image", str(not_image)], "is not an image Pillow can read")
    video = write_video(tmp_path / "clip.mp4", 20)
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(video.read_bytes()[:500])
    _refused(capsys, [*out, "--input-video", str(corrupt)], "--input-video: input video")
    _refused(capsys, [*out, "--extend", str(corrupt)], "--extend: video to extend")
    _refused(capsys, [*out, "--input-video", str(corrupt), "--video-mode", "extend"], "--input-video: video to extend")
    for s in ("1.5", "-0.1", "nan"):
        _refused(capsys, [*out, "--input-video", str(video), "--strength", s], "must be between 0 and 1")
    _refused(capsys, [*out, "--input-video", str(video), "--strength", "0.1", "--recipe", "self_forcing"],
             "recipe 'self_forcing': Self-Forcing's few-step model starts only from its trained steps; strength 0.1 "
             "is below its last one: use a strength of at least 0.25")  # the recipe's own plan says so
    _refused(capsys, [*out, "--extend", str(video), "--strength", "0.5"], "a strength applies to video_to_video only")
    tall = write_image(tmp_path / "tall.png", h=300, w=60)
    _refused(capsys, [*out, "--start-image", str(tall)], "crop away")
    _refused(capsys, [*out, "--start-image", str(write_image(tmp_path / "ok.png")), "--input-video", str(video)],
             "given together")
    _refused(capsys, [*out, "--strength", "0.5"], "without --input-video")
    _refused(capsys, [*out, "--video-mode", "extend"], "--video-mode extend given without --input-video")
    _refused(capsys, [*out, "--keep-frames"], "--keep-frames given without a video")
    _refused(capsys, [*out, "--start-image", str(tmp_path)], "is a directory")
    _refused(capsys, [*out, "--extend", str(write_video(tmp_path / "short.mp4", 5))], "needs at least 9")
    missing = tmp_path / "missing.png"
    _refused(capsys, [*out, "--start-image", str(missing)], "not found")


def test_a_crop_of_exactly_half_is_allowed(tmp_path, capsys, monkeypatch):
    _no_loading(monkeypatch)  # the checks pass, so the (patched) model load is reached
    image = write_image(tmp_path / "wide.png", h=32, w=96)  # the 48x32 run keeps half of it
    with pytest.raises(AssertionError, match="a model was loaded"):
        main(["--start-image", str(image), "--out", str(tmp_path / "o"), *SMALL])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["start_image", "extend", "video_to_video"])
def test_each_pixel_mode_runs_end_to_end_on_the_tiny_default(tmp_path, capsys, mode):
    out = tmp_path / "o"
    if mode == "start_image":
        args, given, extra = ["--start-image", str(write_image(tmp_path / "start.png"))], 1, []
    elif mode == "extend":  # 40 frames: Krea encodes 37 of them (10 latents), the output begins with those
        args, given, extra = ["--extend", str(write_video(tmp_path / "clip.mp4", 40))], 37, []
    else:  # 40 frames: blocks of 9 + 12 + 12 = 33; a 4th block would need 45: the run ends after 3
        args, given, extra = ["--input-video", str(write_video(tmp_path / "clip.mp4", 40)), "--strength", "0.6"], 33, []
    assert main([*args, *extra, "--blocks", "4", "--out", str(out), *SMALL]) == 0
    captured = capsys.readouterr()
    report = json.loads((out / "report.json").read_text())
    assert report["pixels"]["mode"] == mode and report["pixels"]["given_frames"] == given
    assert f"pixels in: {mode}" in captured.out
    generated = 1 + 4 * (3 * report["num_blocks"] - 1)
    if mode == "video_to_video":
        assert report["pixels"]["strength"] == 0.6 and report["num_blocks"] == 3
        assert "ends before block 3" in report["stopped"] and "ends before block 3" in captured.err
        assert _frames_in(out / "sdvg.mp4") == generated == given
    else:
        assert report["num_blocks"] == 4 and report["stopped"] is None
        # the video begins with the given frames; Krea's decoder restarts at block 0, whose first 3 frames are left
        # out as Krea's server leaves them out (docs/pixels.md §5)
        assert _frames_in(out / "sdvg.mp4") == given + generated - 3 == int(report["meta"]["frames"])


@pytest.mark.slow
def test_a_30_fps_input_video_keeps_its_duration(tmp_path, capsys):
    """A 30 fps phone clip (60 frames, 2.0 s) is read on the run's 16 fps clock: 32 frames, so blocks of 9 + 12 and a
    third would need 33; the report and the printed table say the source rate and the frames used."""
    clip = write_video(tmp_path / "phone.mp4", 60, fps=30)
    out = tmp_path / "o"
    assert main(["--input-video", str(clip), "--blocks", "3", "--out", str(out), *SMALL]) == 0
    report = json.loads((out / "report.json").read_text())
    px = report["pixels"]
    assert (px["source_fps"], px["frame_rate"], px["given_frames"], report["num_blocks"]) == (30.0, 16, 21, 2)
    assert report["stop_cause"] == "input_ended" and "ends before block 2" in report["stopped"]
    assert "21 given frame(s) (input 30 fps, resampled to 16 fps by time)" in capsys.readouterr().out
    assert _frames_in(out / "sdvg.mp4") == 21  # 1.3 s of the 2.0 s input, at the 16 fps the video plays at


def _damaged(tmp_path: Path) -> tuple[Path, Path]:
    """Two damaged MP4s with the index first (faststart: what phones and editors write for streaming): one cut in
    half (its index lists 200 frames, 12.5 s; about 90 decode), one whose middle tenth is zeros (frame 45 fails;
    its last frames decode, so a seek to the end finds nothing wrong)."""
    whole = write_video(tmp_path / "whole.mp4", 200, options={"movflags": "faststart"}).read_bytes()
    (tmp_path / "cut.mp4").write_bytes(whole[:len(whole) // 2])
    mid = bytearray(write_video(tmp_path / "mid.mp4", 120, options={"movflags": "faststart"}).read_bytes())
    n = len(mid)
    mid[int(n * 0.45):int(n * 0.55)] = bytes(int(n * 0.55) - int(n * 0.45))
    (tmp_path / "holed.mp4").write_bytes(bytes(mid))
    return tmp_path / "cut.mp4", tmp_path / "holed.mp4"


def test_a_file_cut_short_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    """A seek to the last second the run reads finds no frame: refused up front (exit 2, nothing loaded), as an
    extension of it is; a run that reads only its good first seconds passes the check."""
    _no_loading(monkeypatch)
    cut, _ = _damaged(tmp_path)
    out = ["--out", str(tmp_path / "o")]
    err = _refused(capsys, [*out, "--input-video", str(cut), "--blocks", "12"], "cut short")
    # blocks 0-11 read 141 frames: the 141st on the 16 fps clock needs 8.78 s (140.5 / 16, as ffmpeg's count rounds)
    assert "says it lasts 12.50 s, but it stops at 5.75 s, before the 8.78 s the run reads" in err
    _refused(capsys, [*out, "--extend", str(cut)], "cut short")
    with pytest.raises(AssertionError, match="a model was loaded"):  # 4 blocks read 45 frames (2.8 s): they decode
        main(["--input-video", str(cut), "--blocks", "4", *out, *SMALL])


@pytest.mark.slow
def test_a_frame_that_cannot_be_decoded_mid_run_ends_the_run_like_an_input_that_runs_out(tmp_path, capsys):
    """The committed blocks stay written and playable, report.json / report.png / the table say which frame could
    not be read, one message on stderr, no traceback, exit status 3."""
    _, holed = _damaged(tmp_path)
    out = tmp_path / "o"
    assert main(["--input-video", str(holed), "--blocks", "6", "--out", str(out), *SMALL]) == 3
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.count("frame 45") == 1, captured.err
    assert "error: input video" in captured.err and "4 block(s) committed and written to" in captured.err
    report = json.loads((out / "report.json").read_text())
    assert report["num_blocks"] == 4 and report["blocks_requested"] == 6  # frames 0-44 fill blocks 0-3
    assert report["stop_cause"] == "input_unreadable" and "frame 45" in report["stopped"]
    assert "stopped early: input video" in captured.out and (out / "report.png").is_file()
    assert _frames_in(out / "sdvg.mp4") == 1 + 4 * (3 * 4 - 1) == int(report["meta"]["frames"])  # playable, whole


def test_a_transparent_start_image_is_noted_once_before_anything_loads(tmp_path, capsys, monkeypatch):
    """The alpha rule (composited over white, docs/pixels.md §1) is said once, before the models load."""
    from PIL import Image

    _no_loading(monkeypatch)
    rgba = np.zeros((32, 48, 4), np.uint8)
    rgba[:, :24] = (30, 160, 60, 255)
    rgba[:, 24:] = (255, 0, 255, 0)  # magenta under alpha 0
    Image.fromarray(rgba, "RGBA").save(tmp_path / "cut_out.png")
    with pytest.raises(AssertionError, match="a model was loaded"):
        main(["--start-image", str(tmp_path / "cut_out.png"), "--out", str(tmp_path / "o"), *SMALL])
    err = capsys.readouterr().err
    assert err.count("transparent pixels: composited over white") == 1, err


@pytest.mark.slow
def test_the_demo_starts_a_run_once_and_encodes_its_start_image_once(tmp_path, monkeypatch):
    """The demo starts the run once (its checks and its generation use that one state): the start image is encoded
    once, not again when the blocks begin."""
    import sdvg_core.engine.engine as engine_mod
    from sdvg_core.models.vae import WanVAE

    from run_starts import count_starts

    counts = count_starts(monkeypatch, engine_mod.Engine, WanVAE)
    image = write_image(tmp_path / "start.png")
    assert main(["--start-image", str(image), "--blocks", "2", "--out", str(tmp_path / "out"), *SMALL]) == 0
    assert counts == {"engines": 1, "starts": 1, "encodes_at_start": 1}, counts
    assert json.loads((tmp_path / "out" / "report.json").read_text())["pixels"]["mode"] == "start_image"
