"""sdvg_eval's per-role recipes (--recipe / --drafter-recipe / --target-recipe), drafter files (--drafter-kind,
--drafter-lora, --drafter-lora-alpha, --pt-entry) and the sweep's prompt schedule (--prompt-schedule): each reaches
the engine, is part of the run's identity (a changed one is refused on resume), and bad input exits 2 before any
output folder. Tiny models, --workers 0, 3-4 blocks."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import sdvg_eval.eval as ev
from sdvg_core import (Engine, EngineConfig, GenerationSpec, PromptConditioning, PromptSchedule, recipe_by_name,
                       save_embeddings)
from sdvg_core.io.text import demo_embeddings
from sdvg_eval.config import parse_config
from sdvg_eval.prompts import demo_encoder
from sdvg_eval.records import read_rows
from sdvg_eval.sweep import SweepOutcome
from sdvg_eval.worker import frames_digest

pytestmark = pytest.mark.slow  # eval sweeps on tiny models

PROMPT = "a red fox runs through snow"
STORY = [(0, "a red fox runs through snow"), (2, "the fox stops and looks around")]
GEOMETRY = ["--width", "48", "--height", "32"]
SEED = 42
TEXT_DIM = 32  # the tiny models' text width (PRESETS tiny-target / tiny-drafter)


@pytest.fixture(autouse=True)
def _pinned_code(monkeypatch):
    """Rows made in this test keep one code version while others edit the tree."""
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", "test-eval-recipes")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("eval_recipes")
    (d / "prompts.txt").write_text(PROMPT + "\n")
    (d / "story.txt").write_text("".join(f"{b}: {t}\n" for b, t in STORY))
    return {"dir": d, "prompts": d / "prompts.txt", "story": d / "story.txt"}


def _story_schedule(models) -> list[tuple[int, PromptConditioning]]:
    """The schedule as the demo CLI builds it for the tiny models: each prompt's stand-in embeddings."""
    return [(b, PromptConditioning.make(t, demo_embeddings(t, models.target.cfg.text_dim))) for b, t in STORY]


def _direct(models, spec: GenerationSpec, config: str, engine_config: EngineConfig = EngineConfig()):
    """A plain single-engine run of one config (fresh memo): the state and its frames."""
    cfg = parse_config(config)
    e = Engine(models.target, models.vae, models.drafter if cfg.needs_drafter else None,
               models.scorer if cfg.needs_scorer else None, engine_config)
    state = e.generate(spec, cfg.policy(0, SEED))
    return state, e.frames(state)


def _standin_sweep(monkeypatch) -> dict:
    """Run main() without models: the sweep is replaced (what the driver does before it still happens)."""
    seen: dict = {}

    def run_local(jobs, ra, appender, on_row=None):
        seen.update(jobs=jobs, setup=ra.setup)
        return SweepOutcome()

    monkeypatch.setattr(ev, "run_local", run_local)
    return seen


# ------------------------------------------------------------------------------------------ recipes
def test_role_recipes_resolve_like_the_demo():
    """--recipe sets both roles, a role flag overrides it; a LongLive drafter file runs its own recipe unless
    --drafter-recipe says otherwise; Self-Forcing-family files and the tiny drafter run --recipe."""
    base = ["--prompts", "p.txt"]
    cases = [([], ("krea", "krea")),
             (["--recipe", "self_forcing"], ("self_forcing", "self_forcing")),
             (["--recipe", "self_forcing", "--target-recipe", "krea"], ("self_forcing", "krea")),
             (["--drafter-recipe", "longlive_infinity"], ("longlive_infinity", "krea")),
             (["--drafter", "d.pt", "--drafter-kind", "longlive"], ("longlive", "krea")),
             (["--drafter", "d.pt", "--drafter-kind", "longlive", "--drafter-recipe", "krea"], ("krea", "krea")),
             (["--drafter", "d.pt", "--drafter-kind", "causal_forcing", "--recipe", "self_forcing"],
              ("self_forcing", "self_forcing")),
             (["--drafter", "d.pt"], ("krea", "krea")),
             (["--tiny", "--recipe", "longlive"], ("longlive", "longlive"))]
    for flags, want in cases:
        assert ev.role_recipes(ev.parse_args(base + flags)) == want, flags


def test_role_recipes_reach_the_engine_and_label_the_rows(inputs, tmp_path):
    """A sweep with --drafter-recipe longlive --target-recipe self_forcing computes what one engine with that
    EngineConfig computes (and not what the default pairing does); rows, run.json and summary.md say so."""
    from sdvg_core import tiny_models

    out = tmp_path / "out"
    assert ev.main(["--tiny", "--prompts", str(inputs["prompts"]), "--configs", "accept-all", "--metrics",
                    "imagereward", *GEOMETRY, "--blocks", "3", "--drafter-recipe", "longlive",
                    "--target-recipe", "self_forcing", "--workers", "0", "--out", str(out)]) == 0
    (row,) = read_rows(out / "rows.csv")
    assert row["recipe"] == "drafter longlive / target self_forcing"
    m = tiny_models(seed=0)
    spec = GenerationSpec(PromptConditioning.make(PROMPT, demo_embeddings(PROMPT, TEXT_DIM)), 48, 32, 3, SEED)
    pair = EngineConfig(recipe=recipe_by_name("self_forcing"), drafter_recipe=recipe_by_name("longlive"))
    assert row["frames_digest"] == frames_digest(_direct(m, spec, "accept-all", pair)[1])
    assert row["frames_digest"] != frames_digest(_direct(m, spec, "accept-all")[1])  # the pairing mattered
    ident = json.loads((out / "run.json").read_text())["identity"]
    assert (ident["drafter_recipe"], ident["target_recipe"]) == ("longlive", "self_forcing")
    assert "drafter_recipe longlive, target_recipe self_forcing" in (out / "summary.md").read_text()


def test_published_pairing_keeps_one_recipe_config():
    """Both roles on one recipe: EngineConfig carries it as `recipe` with no per-role override (as before)."""
    from sdvg_eval.worker import ModelSetup

    c = ModelSetup(drafter_recipe="krea", target_recipe="krea").engine_config()
    assert c.drafter_recipe is None and c.target_recipe is None and c.recipe == recipe_by_name("krea")
    c = ModelSetup(drafter_recipe="longlive", target_recipe="krea").engine_config()
    assert (c.recipe_for("drafter"), c.recipe_for("target")) == (recipe_by_name("longlive"), recipe_by_name("krea"))


# ------------------------------------------------------------------------------------------ drafter files
def _model_files(d: Path) -> dict:
    """Tiny real files: a target .safetensors, a LongLive-layout base .pt (`generator`, `model.` prefix), its peft
    LoRA (rank 256, every Linear in the blocks, as LongLive's lora.pt), a VAE."""
    from safetensors.torch import save_file

    from sdvg_core.demo.tiny import random_vae
    from sdvg_core import DRAFTER_KINDS
    from sdvg_core.io.lora import PEFT_PREFIX, block_linear_names
    from sdvg_core.models.wan import build_random
    from sdvg_core.models.wan_config import PRESETS

    d.mkdir(parents=True, exist_ok=True)
    tcfg, dcfg = PRESETS["tiny-target"], PRESETS["tiny-drafter"]
    save_file({f"model.{k}": v.contiguous() for k, v in build_random(tcfg, seed=1).state_dict().items()},
              str(d / "target.safetensors"))
    base = build_random(dcfg, seed=2)
    torch.save({"generator": {f"model.{k}": v for k, v in base.state_dict().items()}}, d / "longlive_base.pt")
    rank, gen, mods = DRAFTER_KINDS["longlive"].lora_rank, torch.Generator().manual_seed(3), dict(base.named_modules())
    lora = {}
    for name in block_linear_names(base):
        lin = mods[name]
        lora[f"{PEFT_PREFIX}{name}.lora_A.weight"] = torch.randn(rank, lin.in_features, generator=gen) * 0.01
        lora[f"{PEFT_PREFIX}{name}.lora_B.weight"] = torch.randn(lin.out_features, rank, generator=gen) * 0.01
    torch.save({"generator_lora": lora}, d / "lora.pt")
    save_file({k: v.contiguous() for k, v in random_vae(seed=4).state_dict().items()}, str(d / "vae.safetensors"))
    (d / "umt5").mkdir(exist_ok=True)
    metric = d / "plugins" / "eval_recipes_metric.py"  # a metric without ImageReward: no reward file needed
    metric.parent.mkdir(exist_ok=True)
    metric.write_text("class M:\n    name = 'eval_recipes_metric'\n    key = 'mean pixel'\n"
                      "    def score(self, frames, prompt):\n        return float(frames.double().mean())\n\n"
                      "def make_metric(arg, device):\n    return M()\n")
    return {k: d / f for k, f in (("target", "target.safetensors"), ("drafter", "longlive_base.pt"),
                                  ("lora", "lora.pt"), ("vae", "vae.safetensors"), ("umt5", "umt5"))}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    return _model_files(tmp_path_factory.mktemp("eval_files"))


@pytest.fixture
def metric_plugin(files, monkeypatch) -> None:
    """The test's metric module (py:eval_recipes_metric) importable, in whatever order the tests run."""
    monkeypatch.syspath_prepend(str(files["target"].parent / "plugins"))


def _real_argv(inputs, files, out: Path, *extra: str) -> list[str]:
    return ["--prompts", str(inputs["prompts"]), "--target", str(files["target"]), "--vae", str(files["vae"]),
            "--drafter", str(files["drafter"]), "--umt5", str(files["umt5"]), "--metrics", "py:eval_recipes_metric",
            *GEOMETRY, "--blocks", "3", "--workers", "0", "--no-report", "--out", str(out), *extra]


def test_drafter_kind_and_lora_reach_the_loader(inputs, files, metric_plugin, tmp_path, monkeypatch):
    """--drafter-kind / --drafter-lora / --drafter-lora-alpha go to load_model_files with the kind's own .pt entry
    (no --pt-entry: None); the row is what the files loaded that way compute, under the kind's recipe (LongLive)."""
    import sdvg_core.io.model_files as mf

    monkeypatch.setattr(ev, "make_encoder", lambda a: demo_encoder(TEXT_DIM))  # the stand-in of umT5
    real, calls = mf.load_model_files, []
    monkeypatch.setattr(mf, "load_model_files", lambda **kw: calls.append(kw) or real(**kw))
    out = tmp_path / "out"
    assert ev.main(_real_argv(inputs, files, out, "--configs", "accept-all", "--drafter-kind", "longlive",
                              "--drafter-lora", str(files["lora"]), "--drafter-lora-alpha", "128")) == 0
    (kw,) = calls
    assert (kw["drafter_kind"], kw["drafter_lora"], kw["drafter_lora_alpha"], kw["pt_entry"]) == \
        ("longlive", str(files["lora"]), 128.0, None)
    (row,) = read_rows(out / "rows.csv")
    assert row["recipe"] == "drafter longlive / target krea"
    m = real(**kw)
    spec = GenerationSpec(PromptConditioning.make(PROMPT, demo_embeddings(PROMPT, TEXT_DIM)), 48, 32, 3, SEED)
    pair = EngineConfig(drafter_recipe=recipe_by_name("longlive"))
    assert row["frames_digest"] == frames_digest(_direct(m, spec, "accept-all", pair)[1])
    no_lora = real(**{**kw, "drafter_lora_alpha": 1e-6})  # the LoRA changes the drafts
    assert row["frames_digest"] != frames_digest(_direct(no_lora, spec, "accept-all", pair)[1])
    ident = json.loads((out / "run.json").read_text())["identity"]
    assert ident["drafter_kind"] == "longlive" and ident["pt_entry"] == "generator"
    assert ident["drafter_lora"].startswith(str(files["lora"].resolve())) and ident["drafter_lora_alpha"] == "128.0"


def test_pt_entry_given_is_passed(inputs, files, tmp_path, monkeypatch):
    seen = _standin_sweep(monkeypatch)
    monkeypatch.setattr(ev, "make_encoder", lambda a: demo_encoder(TEXT_DIM))
    assert ev.main(_real_argv(inputs, files, tmp_path / "o", "--configs", "accept-all", "--drafter-kind",
                              "longlive", "--drafter-lora", str(files["lora"]), "--pt-entry", "generator_ema")) == 0
    s = seen["setup"]
    assert (s.pt_entry, s.drafter_kind, s.drafter_lora, s.drafter_lora_alpha) == \
        ("generator_ema", "longlive", str(files["lora"]), None)
    assert json.loads((tmp_path / "o" / "run.json").read_text())["identity"]["pt_entry"] == "generator_ema"


# ------------------------------------------------------------------------------------------ prompt schedule
def test_schedule_sweep_runs_the_schedule_and_scores_each_segment(inputs, tmp_path):
    """--prompt-schedule: one unit per seed (prompt id 0); each row is the demo's video of that schedule (each
    prompt's stand-in embeddings), routed block by block under its own prompt; the metric scores each segment's
    frames against its own prompt; prompt_text and run.json say which schedule ran."""
    from sdvg_core import tiny_models

    out = tmp_path / "out"
    configs = ["target-only", "sdvg:-0.8"]
    assert ev.main(["--tiny", "--prompt-schedule", str(inputs["story"]), "--configs", *configs, "--metrics",
                    "imagereward", *GEOMETRY, "--blocks", "4", "--workers", "0", "--out", str(out)]) == 0
    rows = read_rows(out / "rows.csv")
    label = " | ".join(f"{b}: {t}" for b, t in STORY)
    assert [(r["config"], r["prompt"], r["seed"]) for r in rows] == [(c, "0", str(SEED)) for c in configs]
    assert all(r["prompt_text"] == label for r in rows)
    assert json.loads((out / "run.json").read_text())["identity"]["schedule"] == label
    assert f"schedule {label}" in (out / "summary.md").read_text()
    m = tiny_models(seed=0)
    spec = GenerationSpec(PromptSchedule.of(_story_schedule(m)), 48, 32, 4, SEED)
    for r in rows:
        state, frames = _direct(m, spec, r["config"])
        assert r["frames_digest"] == frames_digest(frames), r["config"]
        for b in state.blocks[1:]:
            assert r[f"s{b.index}"] == ("" if b.score is None else repr(b.score))
        # blocks 0-1 under the first prompt, blocks 2-3 under the second
        cut = m.vae.config.pixel_frames(3) + m.vae.config.pixel_frames(3, includes_first=False)
        want = (m.scorer.score_frames(frames[:cut], STORY[0][1]).double().sum()
                + m.scorer.score_frames(frames[cut:], STORY[1][1]).double().sum()) / frames.shape[0]
        assert float(r["imagereward_mean"]) == pytest.approx(float(want), rel=1e-9, abs=1e-12)
        assert float(r["imagereward_mean"]) != pytest.approx(
            float(m.scorer.score_frames(frames, STORY[0][1]).double().mean()), rel=1e-9, abs=1e-12)
    sdvg = next(r for r in rows if r["config"] == "sdvg:-0.8")
    assert any(sdvg[f"s{i}"] for i in (2, 3))  # a block of the second segment was routed


def test_schedule_prompts_encoded_once_and_encoder_released(inputs, tmp_path, monkeypatch):
    """Each distinct schedule prompt is encoded once (a repeated prompt reuses it; a re-run encodes nothing) and
    the encoder (umT5 on a real run) is dropped before the sweep; units carry the entries' files."""
    import weakref

    from sdvg_eval.prompts import Encoder

    story = tmp_path / "story.txt"
    story.write_text("0: a fox\n1: a bird\n3: a fox\n")
    calls, held = [], {}

    class Model:
        def __call__(self, text):
            calls.append(text)
            return demo_embeddings(text, TEXT_DIM)

    def make_encoder(a):
        model = Model()
        held["ref"] = weakref.ref(model)
        return Encoder("counting", model)

    def run_local(jobs, ra, appender, on_row=None):
        held.update(alive=held["ref"]() is not None, jobs=jobs)
        return SweepOutcome()

    monkeypatch.setattr(ev, "make_encoder", make_encoder)
    monkeypatch.setattr(ev, "run_local", run_local)
    argv = ["--tiny", "--prompt-schedule", str(story), "--seeds", "1", "2", "--blocks", "4", "--workers", "0",
            "--no-report", "--out", str(tmp_path / "o")]
    assert ev.main(argv) == 0
    assert sorted(calls) == ["a bird", "a fox"] and held["alive"] is False
    units = [j.unit for j in held["jobs"]]
    assert [(u.prompt_id, u.seed) for u in units] == [(0, 1), (0, 2)]
    u = units[0]
    assert [(b, src.text) for b, src in u.schedule] == [(0, "a fox"), (1, "a bird"), (3, "a fox")]
    assert u.schedule[2].prompt.embeddings == u.schedule[0].prompt.embeddings  # the repeated prompt's one file
    assert ev.main(argv) == 0 and len(calls) == 2  # cached: nothing encoded again


def test_schedule_entry_embeddings_files_are_used(tmp_path, monkeypatch):
    """An entry naming its embeddings file is read from it (not encoded); the file is part of the identity."""
    from sdvg_eval.prompts import Encoder

    seen, calls = _standin_sweep(monkeypatch), []
    monkeypatch.setattr(ev, "make_encoder", lambda a: Encoder(
        "counting", lambda text: calls.append(text) or demo_embeddings(text, TEXT_DIM)))
    emb = tmp_path / "night.safetensors"
    save_embeddings(emb, "night", torch.randn(1, 4, TEXT_DIM))
    story = tmp_path / "s.json"
    story.write_text(json.dumps([{"block": 0, "prompt": "day"}, {"block": 2, "prompt": "night",
                                                                   "embeddings": "night.safetensors"}]))
    assert ev.main(["--tiny", "--prompt-schedule", str(story), "--blocks", "3", "--workers", "0", "--no-report",
                    "--out", str(tmp_path / "o")]) == 0
    (job,) = seen["jobs"]
    assert [(b, src.text, src.embeddings) for b, src in job.unit.schedule.switches] == [(2, "night", emb)]
    assert calls == ["day"]
    ident = json.loads((tmp_path / "o" / "run.json").read_text())["identity"]
    assert ident["schedule_embeddings"] == [f"2: {emb.resolve()}:{emb.stat().st_mtime_ns}:{emb.stat().st_size}"]


# ------------------------------------------------------------------------------------------ resume refusals
def test_resume_refuses_another_recipe_schedule_or_drafter_file(inputs, files, metric_plugin, tmp_path, monkeypatch,
                                                                capsys):
    """The run identity holds each role's recipe, the schedule (texts, first blocks, entry files) and the drafter
    file's kind, entry, LoRA file and alpha: a change in any is refused (exit 2), the same command resumes."""
    _standin_sweep(monkeypatch)
    monkeypatch.setattr(ev, "make_encoder", lambda a: demo_encoder(TEXT_DIM))

    def check(argv: list[str], changes: list[tuple[list[str], str]], edit=None) -> None:
        assert ev.main(argv) == 0
        assert ev.main(argv) == 0  # unchanged: resumes
        for extra, field in changes:
            capsys.readouterr()
            assert ev.main(argv + extra) == 2, extra
            assert f"differs in: {field}" in capsys.readouterr().err, extra
        if edit is not None:
            field = edit()
            capsys.readouterr()
            assert ev.main(argv) == 2 and f"differs in: {field}" in capsys.readouterr().err

    tiny = ["--tiny", "--prompts", str(inputs["prompts"]), *GEOMETRY, "--blocks", "3", "--workers", "0",
            "--no-report"]
    check(tiny + ["--out", str(tmp_path / "recipes")],
          [(["--recipe", "self_forcing"], "drafter_recipe, target_recipe"),
           (["--drafter-recipe", "longlive"], "drafter_recipe"), (["--target-recipe", "longlive"], "target_recipe")])

    story = tmp_path / "story.txt"
    story.write_text("0: a fox\n2: a bird\n")
    sched = ["--tiny", "--prompt-schedule", str(story), *GEOMETRY, "--blocks", "3", "--workers", "0", "--no-report",
             "--out", str(tmp_path / "sched")]
    check(sched, [], edit=lambda: story.write_text("0: a fox\n1: a bird\n") and "schedule")  # moved first block
    story.write_text("0: a fox\n2: a bird\n")
    assert ev.main(sched) == 0
    story.write_text("0: a fox\n2: a cat\n")  # edited text
    assert ev.main(sched) == 2 and "differs in: schedule" in capsys.readouterr().err

    lora = tmp_path / "lora.pt"
    lora.write_bytes(files["lora"].read_bytes())
    real = _real_argv(inputs, files, tmp_path / "lora", "--configs", "accept-all", "--drafter-kind", "longlive",
                      "--drafter-lora", str(lora))

    def replace_lora() -> str:
        lora.write_bytes(lora.read_bytes() + b"\0")  # the same path, another file
        os.utime(lora, ns=(1, 1))
        return "drafter_lora"

    check(real, [(["--drafter-lora-alpha", "64"], "drafter_lora_alpha"),
                 (["--drafter-recipe", "krea"], "drafter_recipe"),
                 (["--pt-entry", "generator_ema"], "pt_entry")], edit=replace_lora)


# ------------------------------------------------------------------------------------------ bad input
def _bad_cases(d: Path, files: dict) -> list[tuple[list[str], str]]:
    (d / "late.txt").write_text("0: a fox\n9: a bird\n")
    (d / "nozero.txt").write_text("2: a fox\n")
    (d / "empty.txt").write_text("0: a fox\n2:\n")
    (d / "down.txt").write_text("0: a fox\n2: a bird\n1: a cat\n")
    save_embeddings(d / "wide.safetensors", "wide", torch.zeros(1, 4, TEXT_DIM * 2))
    (d / "wide.json").write_text(json.dumps([{"block": 0, "prompt": "a", "embeddings": "wide.safetensors"}]))
    (d / "gone.json").write_text(json.dumps([{"block": 0, "prompt": "a", "embeddings": "gone.safetensors"}]))
    (d / "ok.txt").write_text("0: a fox\n2: a bird\n")
    framewise = d / "framewise" / "causal_forcing.pt"
    framewise.parent.mkdir(exist_ok=True)
    framewise.write_bytes(files["drafter"].read_bytes())
    tiny = ["--tiny", "--blocks", "4"]
    real = ["--prompts", str(d / "p.txt"), "--target", str(files["target"]), "--vae", str(files["vae"]),
            "--umt5", str(files["umt5"]), "--configs", "accept-all", "--metrics", "py:os"]
    return [
        (tiny + ["--prompt-schedule", str(d / "late.txt")], "entries start at block [9] but the videos have 4 blocks"),
        (tiny + ["--prompt-schedule", str(d / "nozero.txt")], "must start at block 0"),
        (tiny + ["--prompt-schedule", str(d / "empty.txt")], "the prompt is empty"),
        (tiny + ["--prompt-schedule", str(d / "down.txt")], "first blocks must increase"),
        (tiny + ["--prompt-schedule", str(d / "none.txt")], "prompt schedule file not found"),
        (tiny + ["--prompt-schedule", str(d / "wide.json")], "width [64] but the tiny models take 32"),
        (tiny + ["--prompt-schedule", str(d / "gone.json")], "gone.safetensors"),
        (tiny + ["--prompt-schedule", str(d / "ok.txt"), "--prompts", str(d / "p.txt")], "give one"),
        (tiny + ["--prompt-schedule", str(d / "ok.txt"), "--limit", "1"], "--limit applies to --prompts"),
        (tiny, "--prompts FILE (one prompt per line) or --prompt-schedule FILE is missing"),
        (tiny + ["--prompts", str(d / "p.txt"), "--drafter-kind", "longlive"], "--drafter-kind given with --tiny"),
        (tiny + ["--prompts", str(d / "p.txt"), "--drafter-lora", str(files["lora"])], "--drafter-lora given with"),
        (real + ["--drafter-lora", str(files["lora"])], "--drafter-lora given without --drafter"),
        (real + ["--drafter", str(files["drafter"]), "--drafter-kind", "longlive"], "needs its LoRA"),
        (real + ["--drafter", str(files["drafter"]), "--drafter-kind", "causal_forcing_framewise"],
         "causal_forcing_framewise is not supported"),
        (real + ["--drafter", str(framewise), "--drafter-kind", "causal_forcing"], "names a frame-wise model"),
        (real + ["--drafter", str(files["drafter"]), "--drafter-kind", "longlive", "--drafter-lora",
                 str(d / "nolora.pt")], "--drafter-lora " + str(d / "nolora.pt") + ": file not found"),
        (real + ["--drafter", str(files["drafter"]), "--drafter-kind", "longlive", "--drafter-lora",
                 str(files["lora"]), "--drafter-lora-alpha", "-1"], "--drafter-lora-alpha -1.0 must be a positive"),
    ]



def test_bad_schedule_and_drafter_flags_exit_2_before_any_folder(tmp_path, files, capsys):
    (tmp_path / "p.txt").write_text(PROMPT + "\n")
    for argv, message in _bad_cases(tmp_path, files):
        out = tmp_path / "o"
        rc = ev.main(argv + ["--workers", "0", "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 2 and message in err, (argv, err)
        assert not out.exists(), argv
