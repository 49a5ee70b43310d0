"""The evaluation harness (sdvg_eval): configs, records, resume after kills, bit-for-bit rows, sweep saving,
metrics (CLIP from a local folder), the summary table and the Pareto plot. Tiny models on the CPU; the Ray
tests start a local Ray with 2 CPUs and skip when Ray is not installed (CI installs requirements-eval.txt)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import wait_for
from sdvg_eval.config import PAPER_CONFIGS, parse_config, parse_configs
from sdvg_eval.records import read_rows
from sdvg_core import DraftOnly, RandomPolicy, TargetOnly, ThresholdPolicy

pytestmark = pytest.mark.slow  # the eval harness end to end (sweeps, resumes, Ray actors)

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["a red fox jumps over a frozen creek at dawn", "two astronauts play chess on the moon",
           "a paper boat drifts down a rainy street", "a hummingbird hovers near a purple flower"]
CONFIGS = ["target-only", "accept-all", "random:0.5", "sdvg:-0.8", "sdvg:-1.5"]
GEOMETRY = ["--width", "48", "--height", "32", "--blocks", "3"]  # 2 routed blocks; tests' usual tiny size
# columns that must agree bit for bit whatever ran where (time, worker and reuse counts depend on the schedule)
SAME = ("config", "prompt", "seed", "imagereward_mean", "clip", "counted_cost", "target_only_cost",
        "drafter_forwards", "target_forwards", "acceptance", "s1", "s2", "b1", "b2", "frames_digest")
RUN_TIMEOUT = 300  # seconds: a generous bound for one tiny sweep on a busy 2-core machine


# ------------------------------------------------------------------------------------------ fixtures
def _write_clip(folder: Path) -> Path:
    """A tiny random CLIPModel + CLIP BPE tokenizer (vocab/merges written here), saved with save_pretrained."""
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = letters + [c + "</w>" for c in letters] + ["th", "the</w>", "<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nth e</w>\n")
    tok = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    cfg = CLIPConfig(text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                                      num_attention_heads=2, max_position_embeddings=64,
                                      bos_token_id=len(vocab) - 2, eos_token_id=len(vocab) - 1),
                     vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37,
                                        num_hidden_layers=1, num_attention_heads=2), projection_dim=16)
    torch.manual_seed(0)
    CLIPModel(cfg).eval().save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("eval")
    prompts = d / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    return {"dir": d, "prompts": prompts, "clip": _write_clip(d / "clip")}


def _cmd(w: dict, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sdvg_eval", "--tiny", "--prompts", str(w["prompts"]), "--configs", *CONFIGS,
            "--metrics", "imagereward", f"clip:{w['clip']}", *GEOMETRY, "--out", str(out), "--no-report", *extra]


CODE = "test-" + os.urandom(4).hex()  # pinned for this session: other edits of the tree must not split its runs


def _env(code: str = CODE) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0",
            "SDVG_EVAL_CODE_VERSION": code}


def _data_rows(path: Path) -> int:
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def _run_killed(cmd: list[str], out: Path, kill: callable, after_rows: int) -> None:
    """Start a sweep, call kill(proc) once `after_rows` rows are on disk, wait for the process to end."""
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(proc, lambda: _data_rows(out / "rows.csv") >= after_rows, f"{after_rows} row(s) before the kill",
             RUN_TIMEOUT, lambda: proc.stdout.read())
    kill(proc)
    log = proc.communicate(timeout=RUN_TIMEOUT)[0]
    return proc.returncode, log


def _rerun(cmd: list[str]) -> str:
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stderr


def _table(out: Path) -> dict:
    rows = read_rows(out / "rows.csv")
    keys = [(r["config"], r["prompt"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)), "a row was written twice"
    return {k: {c: r[c] for c in SAME} for k, r in zip(keys, rows)}


@pytest.fixture(scope="module")
def local_run(work) -> Path:
    """The single-process sweep (--workers 0), killed after 3 rows (the driver is the worker) and re-run."""
    out = work["dir"] / "local"
    cmd = _cmd(work, out, "--workers", "0")
    _run_killed(cmd, out, lambda p: p.send_signal(signal.SIGKILL), after_rows=3)
    assert 3 <= _data_rows(out / "rows.csv") < len(PROMPTS) * len(CONFIGS)
    log = _rerun(cmd)
    assert "row(s) already in" in log
    return out


# ------------------------------------------------------------------------------------------ unit tests
def test_configs_map_to_the_papers_policies():
    assert parse_config("target-only").policy(0, 42) == TargetOnly()
    assert parse_config("draft-only").policy(0, 42) == DraftOnly()
    assert parse_config("accept-all").policy(0, 42) == DraftOnly(force_reject_first=True)
    assert parse_config("sdvg:-0.7").policy(3, 42) == ThresholdPolicy(-0.7, "min")
    assert parse_config("sdvg-mean:-1.5").policy(3, 42) == ThresholdPolicy(-1.5, "mean")
    r1, r2 = parse_config("random:0.73").policy(1, 42), parse_config("random:0.73").policy(2, 42)
    assert isinstance(r1, RandomPolicy) and r1.accept_rate == 0.73 and r1 == parse_config("random:0.73").policy(1, 42)
    assert r1.seed != r2.seed  # seeded per (seed, prompt): reproducible, not the same draw for every prompt
    assert [c.name for c in parse_configs(["sdvg:-0.7", "target-only", "sdvg:-0.7"])] == ["target-only", "sdvg:-0.7"]
    assert len(parse_configs(list(PAPER_CONFIGS))) == len(PAPER_CONFIGS)
    assert parse_config("sdvg").policy(3, 42) == ThresholdPolicy(-0.7, "min")  # the grammar's default tau
    for bad in ("sdvg:x", "random:1.5", "fast", "target-only:1", "sdvg:nan"):
        with pytest.raises(ValueError):
            parse_config(bad)


def test_bad_flags_exit_2_before_loading(work, tmp_path, capsys):
    from sdvg_eval.eval import main

    rc = main(["--prompts", str(tmp_path / "none.txt"), "--configs", "sdvg:x", "--metrics", "clip:/nowhere",
               "--workers", "0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "none.txt" in err and "sdvg:x" in err and "clip:/nowhere" in err and "--target" in err
    assert not (tmp_path / "o").exists()


def test_a_recipe_that_cannot_run_the_video_exits_2_before_loading(work, tmp_path, capsys):
    """--drafter-recipe with parameters the video's blocks cannot run (a LongLive window smaller than a block)."""
    from sdvg_eval.eval import main

    rc = main(["--tiny", "--prompts", str(work["prompts"]), "--drafter-recipe", "longlive:window=2", "--workers", "0",
               "--out", str(tmp_path / "o")])
    assert rc == 2 and "--drafter-recipe longlive:window=2: LongLive window of 2" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_clip_metric_from_a_local_folder(work):
    from sdvg_eval.metrics import ClipScore

    m = ClipScore(work["clip"])
    g = torch.Generator().manual_seed(0)
    frames = torch.rand(5, 40, 56, 3, generator=g)
    prompt = "the cat"
    got = m.score(frames, prompt)
    # independent path: CLIPModel.forward's logits_per_image = exp(logit_scale) * cosine
    tok = m.tokenizer([prompt], return_tensors="pt")
    with torch.no_grad():
        o = m.model(input_ids=tok.input_ids, attention_mask=tok.attention_mask, pixel_values=m.preprocess(frames))
        want = float((o.logits_per_image[:, 0] / m.model.logit_scale.exp()).double().mean())
    assert math.isfinite(got) and -1 <= got <= 1
    assert got == pytest.approx(want, abs=1e-5)
    assert m.score(frames[:1], prompt) != pytest.approx(m.score(frames[1:2], prompt), abs=1e-9)  # frame-dependent


def test_rows_equal_single_engine_runs_and_saving_is_exact(work, local_run):
    """Every row of the shared-memo sweep equals a fresh single-engine run bit for bit; the saving is exact."""
    from sdvg_core import tiny_models, Engine, Memo, GenerationSpec, PromptConditioning
    from sdvg_core.io.text import demo_embeddings
    from sdvg_eval.metrics import ClipScore
    from sdvg_eval.report import unit_savings
    from sdvg_eval.worker import frames_digest

    rows = read_rows(local_run / "rows.csv")
    assert len(rows) == len(PROMPTS) * len(CONFIGS)
    m = tiny_models(seed=0)
    clip = ClipScore(work["clip"])
    pid = 1
    prompt = PromptConditioning.make(PROMPTS[pid], demo_embeddings(PROMPTS[pid], m.target.cfg.text_dim))
    spec = GenerationSpec(prompt, 48, 32, 3, 42)
    shared, naive, computed = Memo(1 << 30), 0, 0
    for name in CONFIGS:
        row = next(r for r in rows if r["config"] == name and r["prompt"] == str(pid))
        pol = parse_config(name).policy(pid, 42)
        e = Engine(m.target, m.vae, m.drafter, m.scorer)  # fresh memo: the plain single-process run
        s = e.generate(spec, pol)
        frames = e.frames(s)
        assert row["frames_digest"] == frames_digest(frames), name
        assert float(row["imagereward_mean"]) == float(m.scorer.score_frames(frames, PROMPTS[pid]).double().mean())
        assert float(row["clip"]) == clip.score(frames, PROMPTS[pid])
        for b in s.blocks[1:]:
            assert row[f"b{b.index}"] == str(int(b.decision == "accepted"))
            assert row[f"s{b.index}"] == ("" if b.score is None else repr(b.score))
        naive += sum(b.work["drafter_forwards"] + b.work["target_forwards"] for b in s.blocks)
        s2 = Engine(m.target, m.vae, m.drafter, m.scorer, memo=shared).generate(spec, pol)  # the sweep's sharing
        computed += sum(b.work["drafter_forwards"] + b.work["target_forwards"] for b in s2.blocks)
    u = next(u for u in unit_savings(rows) if u.prompt_id == pid)
    assert (u.naive_forwards, u.computed_forwards) == (naive, computed)
    assert 0 < u.computed_forwards < u.naive_forwards and u.saving > 0


def test_rows_of_another_setup_are_refused(work, local_run, tmp_path, monkeypatch, capsys):
    import shutil

    from sdvg_eval.eval import main

    out = tmp_path / "copy"
    shutil.copytree(local_run, out)
    argv = _cmd(work, out, "--workers", "0")[3:]  # in-process: refused before any model loads
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", CODE)
    assert main(argv + ["--blocks", "4"]) == 2
    err = capsys.readouterr().err
    assert "another setup" in err and "blocks" in err
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", "other-code")
    assert main(argv) == 2 and "differs in: code" in capsys.readouterr().err
    assert read_rows(out / "rows.csv") == read_rows(local_run / "rows.csv")  # nothing was appended


def test_report_and_plot_hold_the_csv_numbers(local_run):
    from PIL import Image

    from sdvg_eval.report import PNG_KEY, main as report_main

    assert report_main([str(local_run)]) == 0
    rows = read_rows(local_run / "rows.csv")
    md = (local_run / "summary.md").read_text()
    data = json.loads(Image.open(local_run / "pareto.png").text[PNG_KEY])
    assert data["y"] == "clip"
    plotted = {name: (x, y) for pts in data["curves"].values() for x, y, name in pts}
    plotted.update({name: (x, y) for x, y, name in data["points"]})
    assert set(plotted) == set(CONFIGS) and "accept-all" in [p[2] for p in data["points"]]
    for name in CONFIGS:
        rs = [r for r in rows if r["config"] == name]
        clip = sum(float(r["clip"]) for r in rs) / len(rs)
        counted = sum(float(r["target_only_cost"]) for r in rs) / sum(float(r["counted_cost"]) for r in rs)
        dec = [int(r[k]) for r in rs for k in ("b1", "b2")]
        line = next(l for l in md.splitlines() if l.startswith(f"| {name} |"))
        assert f"| {clip:.4f} |" in line and f"| {counted:.2f}x |" in line and f"{sum(dec) / len(dec):.1%}" in line
        assert plotted[name] == pytest.approx((counted, clip), rel=1e-12)
    assert data["curves"]["sdvg"] == sorted(data["curves"]["sdvg"])  # the tau curve is joined in speedup order
    assert "forwards computed vs" in md and "router's own score" in md


# ------------------------------------------------------------------------------------------ Ray
def test_ray_two_actors_kill_a_worker_resume_same_table(work, local_run):
    pytest.importorskip("ray", reason="Ray not installed (pip install -r requirements-eval.txt); Ray sweep not tested")
    out = work["dir"] / "ray"
    cmd = _cmd(work, out, "--workers", "2", "--cpus-per-worker", "1")

    def kill_worker(proc) -> None:
        pids = {k: v["pid"] for k, v in json.loads((out / "workers.json").read_text()).items()}
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        os.kill(next(iter(pids.values())), signal.SIGKILL)

    rc, log = _run_killed(cmd, out, kill_worker, after_rows=2)
    assert "died" in log, log  # the driver saw the death and re-queued the unit's unfinished configs
    assert "0 to run" in _rerun(cmd)  # a re-run finds every row done
    assert _table(out) == _table(local_run)  # same final table as the single-process run, bit for bit
    assert len({r["worker"] for r in read_rows(out / "rows.csv")}) >= 2  # both actors served units


def test_ray_stays_out_of_the_pack():
    """A ComfyUI user installs requirements.txt only: Ray is in requirements-eval.txt and never imported by the pack."""
    import re

    pattern = re.compile(r"^\s*(import ray|from ray)\b", re.M)
    for pkg in ("sdvg_core", "nodes"):
        for f in (REPO / pkg).rglob("*.py"):
            assert not pattern.search(f.read_text(encoding="utf-8")), f
    assert "ray" not in (REPO / "requirements.txt").read_text().lower()
    assert re.search(r"^ray\b", (REPO / "requirements-eval.txt").read_text(), re.M)
    assert "-r requirements-eval.txt" in (REPO / "requirements-dev.txt").read_text()


# ------------------------------------------------------------------------------------------ the paper's record
def test_rows_carry_the_papers_names(local_run):
    """The paper's columns first and in its order: config, prompt (the index in the prompt file), vr, time_s,
    s1.., b1..; then the seed, other metrics and extras; the text as prompt_text."""
    rows = read_rows(local_run / "rows.csv")
    header = list(rows[0])
    k = int(rows[0]["blocks"]) - 1 if "blocks" in header else sum(c.startswith("b") and c[1:].isdigit()
                                                                  for c in header)
    blocks = [f"s{i}" for i in range(1, k + 1)] + [f"b{i}" for i in range(1, k + 1)]
    assert header[:3 + 2 * k] == ["config", "prompt", "time_s"] + blocks and "prompt_id" not in header
    assert header[3 + 2 * k] == "seed" and header[-1] == "prompt_text"
    for r in rows:
        assert r["prompt_text"] == PROMPTS[int(r["prompt"])]
    # with VisionReward measured, its column `vr` sits where the paper's record has it
    from sdvg_eval.records import columns, metric_columns
    from sdvg_eval.worker import block_columns

    head = columns(["imagereward", "vr"], block_columns(9))
    assert head[:20] == ["config", "prompt", "vr", "time_s"] + [f"s{i}" for i in range(1, 9)] + [
        f"b{i}" for i in range(1, 9)]
    assert metric_columns(head) == ["vr", "imagereward"]


def test_prompt_ids_are_line_numbers_minus_one(tmp_path):
    from sdvg_eval.prompts import read_prompts

    f = tmp_path / "p.txt"
    f.write_text("first\n\n   \nfourth line\n")
    assert [(p.id, p.text) for p in read_prompts(f)] == [(0, "first"), (3, "fourth line")]


def test_shared_memo_rows_after_the_first_config_are_not_fresh(local_run):
    """Each config is its own execution: what an earlier config of the unit left in the memo makes a time not a
    fresh run's (the first config of each unit computed everything itself)."""
    rows = read_rows(local_run / "rows.csv")
    for pid in range(len(PROMPTS)):
        fresh = {r["config"]: r["fresh_time"] for r in rows if r["prompt"] == str(pid)}
        assert fresh["target-only"] == "1"
        assert fresh["sdvg:-1.5"] == "0"  # its prefix was sdvg:-0.8's


def test_fresh_timing_gives_every_config_a_measured_speedup(work, tmp_path, monkeypatch, capsys):
    """--fresh-timing: every row a fresh run's time (reuse within one run is part of it), hence a measured speedup
    for every config; the worker warmed up first; the timing mode is part of the run's identity."""
    from sdvg_eval.eval import main
    from sdvg_eval.report import summarise, metric_columns

    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", CODE)
    out = tmp_path / "fresh"
    argv = ["--tiny", "--prompts", str(work["prompts"]), "--limit", "1", "--metrics", "imagereward",
            "--configs", "target-only", "sdvg:9", "sdvg:-0.7", "--width", "48", "--height", "32",
            "--blocks", "4", "--workers", "0", "--out", str(out)]
    assert main(argv + ["--fresh-timing"]) == 0
    rows = read_rows(out / "rows.csv")
    assert rows and all(r["fresh_time"] == "1" for r in rows), [(r["config"], r["fresh_time"]) for r in rows]
    # sdvg:9 rejects every draft: from block 2 on the target reuses what this run computed for the block before
    # (reuse within one execution, part of a fresh run), so the case once reported as not fresh is exercised
    assert [r[f"b{i}"] for r in rows if r["config"] == "sdvg:9" for i in range(1, 4)] == ["0"] * 3
    summ = summarise(rows, metric_columns(list(rows[0])))
    assert all(s.speedup_measured is not None for s in summ)
    md = (out / "summary.md").read_text()
    assert "*" not in md.split("## Sweep")[0].split("|---|")[1]  # no config marked as not fresh
    assert json.loads((out / "workers.json").read_text())["main"]["warmed_up"] is True
    capsys.readouterr()
    assert main(argv) == 2 and "differs in: timing" in capsys.readouterr().err


def test_empty_prompt_file_is_a_usage_error(tmp_path, capsys):
    from sdvg_eval.eval import main

    for text in ("", "\n  \n\t\n"):
        f = tmp_path / "empty.txt"
        f.write_text(text)
        rc = main(["--tiny", "--prompts", str(f), "--workers", "0", "--out", str(tmp_path / "o")])
        assert rc == 2 and "no prompts" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()


def test_driver_releases_umt5_before_the_sweep(work, tmp_path, monkeypatch):
    """The encoder (umT5 on a real run) is dropped once the prompts are encoded: the sweep never holds it."""
    import weakref

    import sdvg_eval.eval as ev
    from sdvg_eval.prompts import Encoder
    from sdvg_eval.sweep import SweepOutcome

    class Model:  # stands for the loaded umT5
        def __call__(self, text):
            return torch.zeros(1, 512, 32)

    held = {}

    def make_encoder(a):
        m = Model()
        held["ref"] = weakref.ref(m)
        return Encoder("stand-in-umt5", m)

    def run_local(jobs, ra, appender, on_row=None):
        held["alive_during_sweep"] = held["ref"]() is not None
        return SweepOutcome()

    monkeypatch.setattr(ev, "make_encoder", make_encoder)
    monkeypatch.setattr(ev, "run_local", run_local)
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", CODE)
    assert ev.main(["--tiny", "--prompts", str(work["prompts"]), "--limit", "1", "--workers", "0", "--no-report",
                    "--out", str(tmp_path / "o")]) == 0
    assert held["alive_during_sweep"] is False


def test_embedding_cache_key_follows_the_encoder_files(tmp_path):
    """Replacing a file of the umT5 folder (same path) changes the key; so does another folder's files."""
    import os

    from sdvg_eval.prompts import umt5_key

    f = tmp_path / "umt5"
    f.mkdir()
    (f / "config.json").write_text("{}")
    (f / "model.safetensors").write_bytes(b"a" * 10)
    k1 = umt5_key(f)
    assert umt5_key(f) == k1
    (f / "model.safetensors").write_bytes(b"b" * 11)  # replaced in place
    os.utime(f / "model.safetensors", ns=(1, 2))
    assert umt5_key(f) != k1
    assert umt5_key(f, "cuda:1") != umt5_key(f, "cpu") and umt5_key(f, "cuda:1") == umt5_key(f, "cuda:0")


def test_visionreward_metric_fills_the_vr_column(work, tmp_path, monkeypatch):
    """visionreward:FOLDER writes the paper's `vr` column, from a local folder and a local checklist only."""
    import sdvg_eval.visionreward as vr
    from sdvg_eval.eval import main
    from test_visionreward import QUESTIONS, StandIn, Tokenizer, _checkout, _expected, _table

    folder = tmp_path / "VisionReward-Video"
    folder.mkdir()
    for name in ("config.json", "tokenizer_config.json"):  # what the folder check looks for (load_model is a stand-in)
        (folder / name).write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    checkout = _checkout(tmp_path / "VisionReward")
    loaded = []

    def load_model(f, device, dtype):
        loaded.append(str(f))
        tables = {}
        for text in PROMPTS:  # a stand-in that knows the questions of every prompt
            tables.update(_table(text))
        return StandIn(tables), Tokenizer()

    monkeypatch.setattr(vr, "load_model", load_model)
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", CODE)
    out = tmp_path / "vr"
    assert main(["--tiny", "--prompts", str(work["prompts"]), "--limit", "2", "--configs", "target-only", "accept-all",
                 "--metrics", f"visionreward:{folder}", "imagereward", "--vr-checklist", str(checkout),
                 "--vr-video", "frames", *GEOMETRY, "--workers", "0", "--out", str(out)]) == 0
    rows = read_rows(out / "rows.csv")
    header = list(rows[0])
    assert header[:4] == ["config", "prompt", "vr", "time_s"] and header.index("imagereward_mean") > header.index("seed")
    assert len(rows) == 4 and all(float(r["vr"]) == pytest.approx(_expected(), rel=1e-12) for r in rows)
    assert loaded == [str(folder)]
    assert json.loads((out / "run.json").read_text())["identity"]["metrics"][0].startswith(f"visionreward:{folder}|")
    from PIL import Image

    assert "| vr |" in (out / "summary.md").read_text()
    assert json.loads(Image.open(out / "pareto.png").text["sdvg-points"])["y"] == "vr"  # the plot shows the paper's metric


def test_visionreward_needs_local_files(work, tmp_path, capsys):
    from sdvg_eval.eval import main

    rc = main(["--tiny", "--prompts", str(work["prompts"]), "--metrics", "visionreward:THUDM/VisionReward-Video",
               "--workers", "0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "hub ids are refused" in err and not (tmp_path / "o").exists()
