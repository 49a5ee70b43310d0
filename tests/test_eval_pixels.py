"""Evaluation rows that name given pixels (docs/pixels.md, "Evaluation rows"): `prompt || start_image=PATH`,
`|| extend=PATH`, `|| input_video=PATH strength=S`, read relative to the prompt file, checked before the sweep
(exit 2, every problem named with its line), and run: each row's video starts from its pixels."""
from __future__ import annotations

from pathlib import Path

import pytest

from sdvg_core.given.request import VideoToVideo
from sdvg_eval.eval import main
from sdvg_eval.prompts import PromptRowError, read_prompts
from sdvg_eval.records import read_rows
from test_pixels_cli import write_image, write_video

pytestmark = pytest.mark.slow  # an eval sweep with pixel inputs

GEOMETRY = ["--width", "48", "--height", "32", "--blocks", "2"]


def test_rows_parse_relative_paths_modes_and_strength(tmp_path):
    (tmp_path / "in").mkdir()
    f = tmp_path / "prompts.txt"
    f.write_text("plain prompt\n\na fox || start_image=in/fox.png\nwaves || input_video=in/sea.mp4 strength=0.6\n"
                 "a cat || extend=/abs/cat.mp4\nrain || input_video=in/rain.mp4\n"
                 "a dog || input_video=in/dog.mp4 video_mode=extend keep_frames=true\n")
    p = read_prompts(f)
    assert [x.id for x in p] == [0, 2, 3, 4, 5, 6] and p[0].pixels is None and p[1].text == "a fox"
    assert (p[1].pixels.mode, p[1].pixels.path) == ("start_image", tmp_path / "in" / "fox.png")
    assert (p[2].pixels.mode, p[2].pixels.strength) == ("video_to_video", 0.6)
    assert (p[3].pixels.mode, p[3].pixels.path) == ("extend", Path("/abs/cat.mp4"))
    assert p[4].pixels.strength is None and VideoToVideo.strength(p[4].pixels.strength) == 0.7  # the mode's default
    assert p[4].pixels.describe().endswith("rain.mp4 strength 0.7")
    assert (p[5].pixels.mode, p[5].pixels.keep_frames) == ("extend", True)  # the nodes' words: input_video + video_mode
    for bad, msg in (("x || start_image=a.png extend=b.mp4", "exactly one"), ("x || strength=0.5", "exactly one"),
                     ("x || start_image=a.png strength=0.5", "video_to_video only"),
                     ("x || extend=a.mp4 strength=0.5", "video_to_video only"),
                     ("x || input_video=a.mp4 video_mode=restyle", "not one of video_to_video, extend"),
                     ("x || start_image=a.png video_mode=extend", "says what an input_video"),
                     ("x || start_image=a.png keep_frames=true", "for a video"), ("x || photo=a.png", "not one of"),
                     ("x || input_video=a.mp4 strength=high", "not a number"), (" || start_image=a.png", "without a prompt")):
        f.write_text(bad + "\n")
        with pytest.raises(PromptRowError, match=msg):
            read_prompts(f)


def test_bad_rows_are_refused_before_the_sweep_with_their_lines(tmp_path, capsys):
    write_video(tmp_path / "clip.mp4", 12)
    (tmp_path / "notes.png").write_text("not an image")
    f = tmp_path / "prompts.txt"
    f.write_text("fine\nbad image || start_image=notes.png\nbad strength || input_video=clip.mp4 strength=1.5\n"
                 "missing || extend=nowhere.mp4\n")
    out = tmp_path / "o"
    assert main(["--tiny", "--prompts", str(f), "--workers", "0", "--out", str(out), *GEOMETRY]) == 2
    err = capsys.readouterr().err
    assert "line 2: start image" in err and "not an image Pillow can read" in err
    assert "line 3: denoising strength must be between 0 and 1, got 1.5" in err and "line 4: video to extend" in err
    assert not out.exists()
    f.write_text("two || start_image=a.png input_video=clip.mp4\n")
    assert main(["--tiny", "--prompts", str(f), "--workers", "0", "--out", str(out), *GEOMETRY]) == 2
    assert "line 1: name exactly one" in capsys.readouterr().err


def test_a_sweep_runs_rows_with_pixels(tmp_path):
    write_image(tmp_path / "start.png")
    write_video(tmp_path / "clip.mp4", 21)
    f = tmp_path / "prompts.txt"
    f.write_text("a lighthouse || start_image=start.png\na kite || input_video=clip.mp4 strength=0.5\n"
                 "a cat || extend=clip.mp4\n")
    kite = read_prompts(f)[1].pixels.pixel_input()  # rows read videos on the run's 16 fps clock, as the demo does
    assert kite.source.timing() == {"source_fps": 16.0, "frame_rate": 16}
    out = tmp_path / "o"
    assert main(["--tiny", "--prompts", str(f), "--configs", "target-only", "sdvg:-0.7", "--seeds", "1",
                 "--workers", "0", "--out", str(out), *GEOMETRY]) == 0
    rows = read_rows(out / "rows.csv")
    assert len(rows) == 6
    texts = {r["prompt_text"] for r in rows}
    assert texts == {f"a lighthouse || start_image {tmp_path / 'start.png'}",
                     f"a kite || video_to_video {tmp_path / 'clip.mp4'} strength 0.5",
                     f"a cat || extend {tmp_path / 'clip.mp4'}"}
    digests = {r["prompt_text"].split(" ||")[0]: r["frames_digest"] for r in rows if r["config"] == "target-only"}
    assert len(set(digests.values())) == 3
