"""What a new user hits with sdvg_eval: Ctrl-C keeps the finished rows and the same command resumes;
metric problems are all named at once with the fix; the shared checks (--blocks bound, --out writability) run
before anything loads. The Ray-join bound is in test_eval_ray.py."""
from __future__ import annotations

import pytest
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import wait_for
from sdvg_eval.eval import main
from sdvg_eval.records import read_rows
from test_demo_edges import sigint_ignored_at_start

pytestmark = pytest.mark.slow  # the eval CLI in subprocesses, stopped by signals

REPO = Path(__file__).resolve().parents[1]
GEOMETRY = ["--width", "48", "--height", "32", "--blocks", "3"]
CONFIGS = ["target-only", "sdvg:-0.7"]
PROMPTS = ["a lighthouse in a storm", "a cat on a windowsill", "a kite over a beach"]
RUN_TIMEOUT = 300  # seconds: generous for a tiny sweep on a busy 2-core machine


def _prompts(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.txt"
    p.write_text("\n".join(PROMPTS) + "\n")
    return p


def test_ctrl_c_keeps_the_rows_and_the_same_command_resumes(tmp_path):
    """SIGINT to the sweep's process group after its first row: exit 130, no traceback, a line saying how many rows
    are kept and how to resume; running the command again finishes the rest without redoing a row."""
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "sdvg_eval", "--tiny", "--prompts", str(_prompts(tmp_path)), "--configs", *CONFIGS,
           "--metrics", "imagereward", *GEOMETRY, "--workers", "0", "--no-report", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "SDVG_EVAL_CODE_VERSION": "ctrl-c-test"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=sigint_ignored_at_start)
    wait_for(proc, lambda: len(read_rows(out / "rows.csv")) >= 1, "first row", RUN_TIMEOUT, lambda: proc.stderr.read())
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    kept = read_rows(out / "rows.csv")
    total = len(PROMPTS) * len(CONFIGS)
    assert 1 <= len(kept) < total
    assert f"in {out / 'rows.csv'} in all; re-run the same command to resume" in err
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(kept)} row(s) already in" in again.stderr
    rows = read_rows(out / "rows.csv")
    keys = [(r["config"], r["prompt"], r["seed"]) for r in rows]
    assert len(rows) == total and len(set(keys)) == total
    assert rows[:len(kept)] == kept  # the rows before Ctrl-C stayed as they were


def test_visionreward_without_a_folder_names_the_fix_and_every_problem_at_once(tmp_path, capsys):
    prompts = _prompts(tmp_path)
    assert main(["--tiny", "--prompts", str(prompts), "--metrics", "visionreward", "--workers", "0",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "write visionreward:FOLDER" in err and "--vr-checklist is missing" in err
    folder = tmp_path / "VisionReward-Video"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # used to pass the check; the next run then found the rest missing
    assert main(["--tiny", "--prompts", str(prompts), "--metrics", f"visionreward:{folder}", "--workers", "0",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "has no weights" in err and "has no tokenizer" in err and "--vr-checklist is missing" in err
    assert not (tmp_path / "o").exists()


def test_blocks_bound_and_an_unwritable_out_are_checked_first(tmp_path, capsys):
    prompts = _prompts(tmp_path)
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["--tiny", "--prompts", str(prompts), "--blocks", "10001", "--workers", "0", "--out",
                 str(f / "o")]) == 2
    err = capsys.readouterr().err
    assert "--blocks 10001 is more than 10,000" in err and f"--out {f / 'o'}: {f} is not a folder" in err


def test_sigterm_keeps_the_rows_like_ctrl_c_and_exits_143(tmp_path, capsys, monkeypatch):
    """SIGTERM (kill, timeout, systemd, docker stop) after the first row: the sweep ends as after Ctrl-C (the finished
    rows stay, one line saying how to resume, no traceback) with exit status 143; the previous handler comes back."""
    import sdvg_eval.eval as ev

    real = ev.run_local

    def run_local(jobs, ra, appender, on_row):
        def then_sigterm(row):
            on_row(row)
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` sends it
        return real(jobs, ra, appender, then_sigterm)

    monkeypatch.setattr(ev, "run_local", run_local)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "o"
    rc = main(["--tiny", "--prompts", str(_prompts(tmp_path)), "--configs", *CONFIGS, "--width", "48", "--height",
               "32", "--blocks", "2", "--workers", "0", "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 143 and "Traceback" not in err, err[-3000:]
    assert "terminated (SIGTERM): 1 row(s) written by this run" in err and "re-run the same command to resume" in err
    assert len(read_rows(out / "rows.csv")) == 1 and signal.getsignal(signal.SIGTERM) is before
