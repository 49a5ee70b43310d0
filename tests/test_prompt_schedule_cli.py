"""Prompt-schedule files and the demo CLI's --prompt-schedule / per-role recipe flags."""
from __future__ import annotations

import json

import pytest

from sdvg_core.demo.cli import main
from sdvg_core import load_embeddings, parse_schedule, read_schedule, save_embeddings
from sdvg_core.engine.prompt_schedule import ScheduleError, encode_schedule
import torch



def test_both_forms_parse_to_the_same_entries(tmp_path):
    lines = "# a fox story\n0: a red fox runs through snow\n\n10: the fox stops\n20:  the fox jumps  \n"
    js = json.dumps([{"block": 0, "prompt": "a red fox runs through snow"}, {"block": 10, "prompt": "the fox stops"},
                     {"block": 20, "prompt": "the fox jumps"}])
    a, b = parse_schedule(lines), parse_schedule(js)
    assert a == b and [(first, src.text) for first, src in a] == [(0, "a red fox runs through snow"),
                                                                  (10, "the fox stops"), (20, "the fox jumps")]
    f = tmp_path / "s.json"
    f.write_text(json.dumps([{"block": 0, "prompt": "x", "embeddings": "e.safetensors"}]))
    assert read_schedule(f)[0].prompt.embeddings == tmp_path / "e.safetensors"  # relative to the file's folder


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("0: a\n5:\n", ":2: the prompt is empty"),
    ("0: a\nfive: b\n", ":2: expected `block: prompt`"),
    ("3: a\n", "must start at block 0"),
    ("0: a\n4: b\n4: c\n", "must increase"),
    ("0: a\n4: b\n2: c\n", "must increase"),
    ('[{"block": 0}]', 'needs "block" and "prompt"'),
    ('[{"block": -1, "prompt": "a"}]', "whole number >= 0"),
    ('[{"block": 0, "prompt": "a"}', "not valid JSON"),
    ("[]", "non-empty list"),
])
def test_bad_schedule_files_are_named(text, message):
    with pytest.raises(ScheduleError, match=message):
        parse_schedule(text, "s.txt")


def test_entries_are_encoded_once_per_prompt_or_read_from_their_file(tmp_path):
    emb = torch.randn(1, 4, 8)
    save_embeddings(tmp_path / "e.safetensors", "from file", emb)
    entries = parse_schedule(json.dumps([{"block": 0, "prompt": "a"}, {"block": 2, "prompt": "b",
                                          "embeddings": str(tmp_path / "e.safetensors")}, {"block": 4, "prompt": "a"}]))
    calls = []
    sched = encode_schedule(entries, lambda t: calls.append(t) or torch.full((1, 4, 8), float(len(calls))),
                            load=lambda p: load_embeddings(p)[1])
    assert calls == ["a"] and torch.equal(sched[1].prompt.embeddings, emb)
    assert torch.equal(sched[0].prompt.embeddings, sched[2].prompt.embeddings)
    assert [(first, p.text) for first, p in sched] == [(0, "a"), (2, "b"), (4, "a")]


@pytest.mark.slow
def test_demo_runs_a_thirty_block_three_prompt_video(tmp_path, capsys):
    sched = tmp_path / "schedule.txt"
    sched.write_text("0: a red fox runs through snow\n10: the fox stops and looks around\n20: the fox jumps into a river\n")
    out = tmp_path / "out"
    code = main(["--prompt-schedule", str(sched), "--blocks", "30", "--width", "16", "--height", "16", "--quiet",
                 "--out", str(out), "--drafter-recipe", "longlive"])
    assert code == 0, capsys.readouterr().err
    rep = json.loads((out / "report.json").read_text())
    assert [p["first_block"] for p in rep["prompts"]] == [0, 10, 20]
    assert [b["prompt"] for b in rep["blocks"]] == [0] * 10 + [1] * 10 + [2] * 10
    assert rep["recipe"] == "drafter longlive / target krea"
    assert rep["meta"]["frames"] == str(1 + 4 * (90 - 1))
    assert (out / "sdvg.mp4").stat().st_size > 0 and (out / "report.png").exists()


def test_bad_schedule_is_refused_before_loading_anything(tmp_path, capsys):
    sched = tmp_path / "s.txt"
    sched.write_text("0: a\n12: b\n")
    code = main(["--prompt-schedule", str(sched), "--blocks", "6", "--prompt", "x", "--quiet", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "nothing was loaded" in err
    assert "--prompt-schedule with --prompt" in err and "start at block [12] but the video has 6 blocks" in err
    assert not (tmp_path / "o").exists()
