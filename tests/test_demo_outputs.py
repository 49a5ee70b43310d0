"""No run loses data (docs/cli.md "Where the demo writes", "Ctrl-C, SIGTERM and SIGHUP"): an input that is one of
the run's own outputs is read whole before its name is taken over, two runs cannot both write one --out, files
appear under their names only when complete, SIGHUP is handled as SIGTERM (also when the terminal itself is gone),
and a run killed outright leaves a folder the next run tells apart."""
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

from conftest import wait_for
from sdvg_core.demo.cli import main
from test_demo_edges import RUN_TIMEOUT, SIGINT_AFTER_BLOCK, _stopped_mid_run

pytestmark = pytest.mark.slow  # the demo CLI in subprocesses: signals, hang-ups, two runs into one folder
REPO = Path(__file__).resolve().parents[1]
SMALL = ["--width", "48", "--height", "32", "--quiet"]
OUTPUTS = {"sdvg.mp4", "report.json", "report.png"}
COMMITTED = re.compile(rb"block (\d+) -> ")


def _frames_in(video: Path) -> int:
    import av

    with av.open(str(video)) as c:
        return sum(1 for _ in c.decode(video=0))


def _demo(tmp_path: Path, out: Path, *args: str, **popen) -> subprocess.Popen:
    """The demo as a child process (its progress bar on stderr says when a block has committed)."""
    cmd = [sys.executable, "-m", "sdvg_core.demo", "--width", "48", "--height", "32", "--out", str(out), *args]
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                            **popen)


def _collect(stream, into: list[bytes]) -> threading.Thread:
    t = threading.Thread(target=lambda: into.extend(iter(lambda: stream.read(1), b"")), daemon=True)
    t.start()
    return t


def _after_block(proc: subprocess.Popen, err: list[bytes], block: int = SIGINT_AFTER_BLOCK) -> None:
    wait_for(proc, lambda: any(int(m) >= block for m in COMMITTED.findall(b"".join(err))),
             f"commit of block {block}", RUN_TIMEOUT, lambda: b"".join(err).decode())


# --------------------------------------------------------------------------------------------- chaining
def test_extending_or_restyling_a_runs_own_output_into_its_folder_keeps_the_input(tmp_path, capsys):
    """`--extend X/sdvg.mp4 --out X --overwrite` (and the same with --input-video): the input is read whole before the
    new video takes its name; before, the writer truncated it while it was being read."""
    x = tmp_path / "x"
    size = ["--quiet"]  # 96x64: a file big enough that a reader does not hold it all in its first buffer
    assert main(["--blocks", "6", "--out", str(x), *size]) == 0
    first = _frames_in(x / "sdvg.mp4")
    assert first == 1 + 4 * (3 * 6 - 1)  # 69
    assert main(["--extend", str(x / "sdvg.mp4"), "--blocks", "2", "--out", str(x), "--overwrite", *size]) == 0
    report = json.loads((x / "report.json").read_text())
    assert report["pixels"]["given_frames"] == first and report["stopped"] is None
    extended = first + 21 - 3  # Krea hides block 0's first 3 frames after given pixels (docs/pixels.md §5)
    assert _frames_in(x / "sdvg.mp4") == extended == int(report["meta"]["frames"])
    assert main(["--input-video", str(x / "sdvg.mp4"), "--blocks", "3", "--out", str(x), "--overwrite", *size]) == 0
    report = json.loads((x / "report.json").read_text())
    assert report["stop_cause"] is None and report["num_blocks"] == 3  # 9 + 12 + 12 frames read, none broken
    assert _frames_in(x / "sdvg.mp4") == 33 and set(os.listdir(x)) == OUTPUTS
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ one run per folder
def test_a_folder_claimed_by_a_running_run_is_refused_even_with_overwrite(tmp_path, capsys, monkeypatch):
    """The claim is taken before anything loads and held for the run: a second run into that folder is refused
    (exit 2, one message naming the other run), --overwrite or not; once released, the folder is free."""
    from sdvg_core.demo.claim import FolderTaken, claim_output

    out = tmp_path / "o"
    held = claim_output(out)
    try:
        for extra in ([], ["--overwrite"]):
            assert main(["--blocks", "1", "--out", str(out), *extra, *SMALL]) == 2
            err = capsys.readouterr().err
            assert "another run is writing there" in err and f"pid {os.getpid()}" in err, err
        with pytest.raises(FolderTaken, match="another run is writing there"):
            claim_output(out, overwrite=True)
    finally:
        held.release()
    assert not out.exists()  # the claim made it and left nothing behind
    assert main(["--blocks", "1", "--out", str(out), *SMALL]) == 0
    assert set(os.listdir(out)) == OUTPUTS  # no claim, no staging left


def test_a_crash_before_any_file_is_begun_leaves_the_folder_free(tmp_path, capsys, monkeypatch):
    """An unexpected error while the models load (nothing written yet) releases the claim: no unfinished folder, the
    next run into it needs no --overwrite."""
    import sdvg_core.demo.cli as cli

    class Crash(Exception):
        pass

    def crash(*_a, **_k):
        raise Crash

    out = tmp_path / "o"
    with monkeypatch.context() as m:
        m.setattr(cli, "tiny_models", crash)
        with pytest.raises(Crash):
            main(["--blocks", "1", "--out", str(out), *SMALL])
    assert not out.exists()
    assert main(["--blocks", "1", "--out", str(out), *SMALL]) == 0
    capsys.readouterr()


def test_two_dated_folders_taken_in_the_same_second_are_two_folders(tmp_path):
    from sdvg_core.demo.claim import claim_dated

    names = iter([tmp_path / "d", tmp_path / "d", tmp_path / "d-2"])
    a = claim_dated(lambda: next(names))
    b = claim_dated(lambda: next(names))  # d is taken: the next name
    assert (a.folder.name, b.folder.name) == ("d", "d-2")
    a.release()
    b.release()


def test_two_runs_started_together_into_one_out_one_is_refused(tmp_path):
    """Run A writes to o (no files under their final names while it runs: they are written beside and moved into
    place); run B, started into o with --overwrite while A runs, is refused with exit 2 and touches nothing; A,
    stopped with SIGTERM, leaves its own complete video and report. Before, both printed "wrote" and exited 0, and
    one run's files were gone."""
    out = tmp_path / "o"
    a = _demo(tmp_path, out, "--blocks", "10000", "--overwrite")  # stopped long before its end
    err_a: list[bytes] = []
    reader = _collect(a.stderr, err_a)
    _after_block(a, err_a, 1)
    b = _demo(tmp_path, out, "--blocks", "2", "--overwrite")
    out_b, err_b = b.communicate(timeout=RUN_TIMEOUT)
    assert b.returncode == 2, err_b.decode()[-2000:]
    assert "another run is writing there" in err_b.decode() and "wrote" not in out_b.decode()
    assert a.poll() is None and not (set(os.listdir(out)) & OUTPUTS), os.listdir(out)  # nothing under a final name
    a.send_signal(signal.SIGTERM)
    a.communicate(timeout=RUN_TIMEOUT)
    reader.join(timeout=10)
    assert a.returncode == 143, b"".join(err_a).decode()[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["blocks_requested"] == "10000"  # A's report, not B's
    assert _frames_in(out / "sdvg.mp4") == int(report["meta"]["frames"])
    assert set(os.listdir(out)) == OUTPUTS


def test_a_run_killed_outright_leaves_a_folder_the_next_run_tells_is_unfinished(tmp_path, capsys):
    """SIGKILL mid-run (nothing of the run can react): the claim stays unlocked and the partial files stay beside
    their names; the next run into the folder says it holds an unfinished run and refuses it (exit 2), and with
    --overwrite discards them and writes there."""
    out = tmp_path / "o"
    proc = _demo(tmp_path, out, "--blocks", "100")
    err: list[bytes] = []
    reader = _collect(proc.stderr, err)
    _after_block(proc, err)
    proc.kill()
    proc.wait(timeout=RUN_TIMEOUT)
    reader.join(timeout=10)
    assert not (out / "sdvg.mp4").exists()  # only partial files, beside their names
    assert main(["--blocks", "1", "--out", str(out), *SMALL]) == 2
    err_text = capsys.readouterr().err
    assert "holds an unfinished run" in err_text and "--overwrite" in err_text and f"pid {proc.pid}" in err_text
    assert main(["--blocks", "1", "--out", str(out), "--overwrite", *SMALL]) == 0
    assert set(os.listdir(out)) == OUTPUTS


# ------------------------------------------------------------------------------------------------- SIGHUP
def test_sighup_is_handled_as_sigterm(tmp_path):
    """SIGHUP (a closed terminal, a dropped ssh session) to the demo mid-run: one message, exit 129, the report of
    the committed blocks, and the mp4 complete when the process has exited (its writer joined)."""
    rc, stdout, text, out = _stopped_mid_run(tmp_path, lambda proc: os.kill(proc.pid, signal.SIGHUP))
    frames_now = _frames_in(out / "sdvg.mp4")
    assert rc == 129, text[-3000:]
    assert "Traceback" not in text and text.count("hung up (SIGHUP) at block") == 1, text[-3000:]
    m = re.search(r"hung up \(SIGHUP\) at block (\d+) of 200: (\d+) block\(s\) committed and written to \S+ "
                  r"\((\d+) frames, playable\)", text)
    assert m, text[-2000:]
    assert int(m[3]) == frames_now == 1 + 4 * (3 * int(m[2]) - 1)
    report = json.loads((out / "report.json").read_text())
    assert report["num_blocks"] == int(m[2]) and report["meta"]["interrupted_at_block"] == m[1]
    assert set(os.listdir(out)) == OUTPUTS


def test_a_closed_terminal_still_leaves_a_playable_video_and_its_report(tmp_path):
    """The demo on a pseudo-terminal that is its controlling terminal; the terminal is closed mid-run (the kernel
    sends SIGHUP, and every later write to it fails with EIO): the run still finishes its files and exits 129."""
    import fcntl
    import pty
    import termios

    import struct

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # wide: the bar shows its postfix

    def controlling_terminal():  # a new session whose controlling terminal is the pty (stdin)
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    out = tmp_path / "o"
    proc = _demo(tmp_path, out, "--blocks", "100", stdin=slave, stdout=slave, stderr=slave,
                 preexec_fn=controlling_terminal)
    os.close(slave)
    seen: list[bytes] = []

    def read():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _after_block(proc, seen)
    os.close(master)  # the terminal hangs up
    rc = proc.wait(timeout=RUN_TIMEOUT)
    assert rc == 129, b"".join(seen).decode(errors="replace")[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert _frames_in(out / "sdvg.mp4") == int(report["meta"]["frames"]) == 1 + 4 * (3 * report["num_blocks"] - 1)
    assert set(os.listdir(out)) == OUTPUTS
