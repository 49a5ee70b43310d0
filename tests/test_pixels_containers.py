"""Videos as players read them (docs/pixels.md §1): the end-of-input check accepts what ffmpeg plays (container
durations rounded to milliseconds, streams whose timestamps start late, a single keyframe) and still refuses a file
cut short; a stream without timestamps, a picture and a too-short duration-less WebM are refused before any model
loads; the 16 fps clock makes as many frames as ffmpeg's `fps=16`; non-square pixels are shown as a player shows them.
Every file is written here with ffmpeg."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from media_files import (duration_less_webm, ffmpeg_fps16_count, late_start_clip, late_start_ts, non_square_mp4,
                         pattern_clip, raw_h264)
from sdvg_core.demo.cli import main
from sdvg_core.given.errors import PixelInputError
from sdvg_core.given.sources import video_source
from sdvg_core.given.videos import check_video, count_frames, probe_video, read_video

av = pytest.importorskip("av")

SMALL = ["--width", "96", "--height", "64", "--quiet"]
MODES = (["--extend"], ["--input-video"])


def _no_loading(monkeypatch):
    import sdvg_core.demo.cli as cli

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(cli, "load_model_files", boom)
    monkeypatch.setattr(cli, "tiny_models", boom)


def _passes_checks(args: list[str], tmp_path: Path) -> None:
    """Every check passes: the (patched) model load is reached."""
    with pytest.raises(AssertionError, match="a model was loaded"):
        main([*args, "--blocks", "3", "--out", str(tmp_path / "o"), *SMALL])


def _refused(capsys, args: list[str], tmp_path: Path, *expect: str) -> str:
    assert main([*args, "--blocks", "3", "--out", str(tmp_path / "o"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "nothing was loaded" in err, err
    for e in expect:
        assert e in err, err
    return err


# ----------------------------------------------------------------------------------- the end-of-input check
@pytest.mark.parametrize("suffix", [".webm", ".mkv"])
@pytest.mark.parametrize("rate", [16, 24, 60])
def test_webm_and_mkv_at_film_and_recorder_rates_pass_the_end_check(tmp_path, monkeypatch, suffix, rate):
    """A valid 3 s WebM / MKV (OBS records MKV at 60 fps; 24 fps is film): the container's duration is rounded to
    whole milliseconds and so is each frame's time; ffmpeg plays it whole, so it is extended and restyled."""
    _no_loading(monkeypatch)
    clip = pattern_clip(tmp_path / f"clip{rate}{suffix}", rate, 3 * rate)
    for mode in MODES:
        _passes_checks([*mode, str(clip)], tmp_path)


def test_a_webm_cut_short_is_still_refused(tmp_path, capsys, monkeypatch):
    """The same WebM with its second half gone (its header still says 3 s): refused before loading."""
    _no_loading(monkeypatch)
    whole = pattern_clip(tmp_path / "whole.webm", 60, 180, extra=("-g", "30")).read_bytes()
    cut = tmp_path / "cut.webm"
    cut.write_bytes(whole[:len(whole) // 2])
    for mode in MODES:
        _refused(capsys, [*mode, str(cut)], tmp_path, "cut short", "cut.webm")


def test_an_mpeg_ts_whose_timestamps_start_late_with_one_keyframe_passes(tmp_path, monkeypatch):
    """A 3 s MPEG-TS with timestamps from 1.4 s and one keyframe (what a broadcast or a camera stream gives): the
    end check seeks to the stream's own time, and where a seek decodes nothing it reads the packets instead."""
    _no_loading(monkeypatch)
    clip = late_start_ts(tmp_path / "late.ts")
    for mode in MODES:
        _passes_checks([*mode, str(clip)], tmp_path)
    assert count_frames(clip, 16) == ffmpeg_fps16_count(clip) == 48


@pytest.mark.parametrize("suffix", [".webm", ".mkv", ".mp4"])
def test_a_recording_whose_timestamps_start_late_passes_whole_and_is_refused_cut_short(tmp_path, capsys, monkeypatch,
                                                                                        suffix):
    """A 3 s clip whose timestamps start at 1.4 s (a cut or remuxed recording): a WebM / MKV header then says it ends
    at 4.4 s (Matroska counts from time 0), an MP4 that it lasts 3 s; whole it passes in both modes, and with its
    last 40% gone (its frames stop 1.2-1.6 s after the first, i.e. at 2.6-3.0 s on the stream's clock, before the
    2.0 s 3 blocks read) it is refused: the end is looked for on the stream's own clock."""
    _no_loading(monkeypatch)
    whole = late_start_clip(tmp_path / f"late{suffix}")
    assert probe_video(whole).seconds == pytest.approx(3.0) and probe_video(whole).start == pytest.approx(1.4)
    for mode in MODES:
        _passes_checks([*mode, str(whole)], tmp_path)
    data = whole.read_bytes()
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(data[:len(data) * 6 // 10])
    for mode in MODES:
        _refused(capsys, [*mode, str(cut)], tmp_path, "cut short", cut.name)


def test_a_stream_without_timestamps_is_refused_before_loading_naming_keep_frames(tmp_path, capsys, monkeypatch):
    """A raw .h264 elementary stream carries no timestamps, so it cannot be put on the 16 fps clock: refused up
    front, naming the file and --keep-frames, in both modes; with --keep-frames its frames are read as they are."""
    _no_loading(monkeypatch)
    clip = raw_h264(tmp_path / "camera.h264")
    for mode in MODES:
        err = _refused(capsys, [*mode, str(clip)], tmp_path, "camera.h264", "no timestamps", "--keep-frames")
        assert "Traceback" not in err
    for mode in MODES:
        _passes_checks([*mode, str(clip), "--keep-frames"], tmp_path)


def test_a_picture_as_input_video_and_a_short_webm_without_duration_are_refused_before_loading(tmp_path, capsys,
                                                                                                monkeypatch):
    """A PNG given as --input-video is a picture (use --start-image); a 5-frame WebM without a duration in its header
    (as a browser's MediaRecorder writes it) is counted by decoding: both refused before any model loads."""
    from PIL import Image

    _no_loading(monkeypatch)
    Image.fromarray(np.zeros((64, 96, 3), np.uint8)).save(tmp_path / "photo.png")
    for mode in MODES:
        _refused(capsys, [*mode, str(tmp_path / "photo.png")], tmp_path, "photo.png", "is a picture", "--start-image")
    webm = duration_less_webm(tmp_path / "recorded.webm", frames=5)
    for mode in MODES:
        _refused(capsys, [*mode, str(webm)], tmp_path, "recorded.webm", "needs at least 9")
    longer = duration_less_webm(tmp_path / "longer.webm", frames=60)  # 2 s: enough for the 3 blocks' first 9
    _passes_checks(["--input-video", str(longer)], tmp_path)


# ------------------------------------------------------------------------------------------- the 16 fps clock
RATES = ("12", "16", "24", "25", "30000/1001", "30", "60")
FRAMES = (48, 49, 50, 73, 90, 91)  # at these rates: whole seconds and fractions of them


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".mp4", ".webm"])
def test_frames_on_the_16_fps_clock_are_as_many_as_ffmpegs_fps_filter_makes(tmp_path, suffix):
    """For every rate and length of the table (whole and fractional durations, exact and millisecond timestamps),
    the reader's frame count equals ffmpeg's own `-vf fps=16` count: round(16 x duration), halves up."""
    wrong = []
    for rate in RATES:
        for n in FRAMES:
            clip = pattern_clip(tmp_path / f"c{rate.replace('/', '_')}_{n}{suffix}", rate, n, size="32x32")
            ours, theirs = count_frames(clip, 16), ffmpeg_fps16_count(clip)
            if ours != theirs:
                wrong.append(f"{rate} fps x {n} frames: {ours}, ffmpeg {theirs}")
    assert not wrong, wrong


def test_a_3_second_clip_at_30_or_24_fps_is_48_frames(tmp_path):
    for rate in (24, 30):
        clip = pattern_clip(tmp_path / f"three{rate}.mp4", rate, 3 * rate)
        assert count_frames(clip, 16) == 48 == ffmpeg_fps16_count(clip)


# ---------------------------------------------------------------------------------------- non-square pixels
def test_non_square_pixels_are_stretched_as_a_player_shows_them(tmp_path, capsys, monkeypatch):
    """An MP4 stored 96x64 with a 2:1 sample aspect ratio is shown 192x64: the fit rule sees 192x64 (no crop at
    a 192x64 run), and the frames are the stored ones stretched to it, not its middle rows cropped and stretched."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (12, 64, 96, 3), dtype=np.uint8)
    clip = non_square_mp4(tmp_path / "anamorphic.mp4", frames)
    info = check_video(clip, (64, 192))
    assert (info.height, info.width) == (64, 192)
    got = torch.cat(list(read_video(clip, (64, 192))), dim=2)  # [1, 3, 12, 64, 192]
    stored = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255  # [12, 3, 64, 96]
    want = F.interpolate(stored, size=(64, 192), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
    assert (got[0].permute(1, 0, 2, 3) - (want - 0.5) / 0.5).abs().max() < 1e-5
    with pytest.raises(PixelInputError, match="192x64"):  # the portrait run would crop the shown picture
        check_video(clip, (192, 64))
    _no_loading(monkeypatch)
    _passes_checks(["--extend", str(clip), "--width", "192", "--height", "64"], tmp_path)


def test_a_raw_stream_read_as_it_is_keeps_every_frame(tmp_path):
    clip = raw_h264(tmp_path / "camera.h264", frames=20)
    with pytest.raises(PixelInputError, match="no timestamps"):
        video_source(clip)
    assert video_source(clip, keep_frames=True).count() == 20
