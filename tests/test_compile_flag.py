"""`--compile [BACKEND]` where users turn it on: the demo, the eval and the benchmarks build their
CausalWans with compile=..., and what they write says "compiled": true and which models (report.json, the eval's
run.json / summary.md, the bench JSON and table). Tests use the `eager` backend: dynamo traces, nothing is
code-generated, so no inductor compile runs in CI.
"""
from __future__ import annotations

import pytest
import importlib
import json
import sys
from pathlib import Path

from sdvg_core import CausalWan, Engine, GenerationSpec, PromptConditioning, TargetOnly, build_report, tiny_models
from sdvg_core.demo.cli import main as demo_main
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.engine.report import compile_backend, compiled_line, compiled_models
from sdvg_core.io.text import demo_embeddings
from sdvg_core.models.wan import build_random
from sdvg_core.models.wan_config import PRESETS

pytestmark = pytest.mark.slow  # the demo, eval and bench with torch.compile (eager backend)

ROOT = Path(__file__).resolve().parents[1]
BACKEND = "eager"


def test_backend_of_a_dit_and_the_report_line():
    cfg = PRESETS["tiny-drafter"]
    net = build_random(cfg, seed=1)
    assert compile_backend(CausalWan(net, cfg)) is None
    assert compile_backend(CausalWan(net, cfg, compile=True)) == "inductor"  # torch.compile's default backend
    assert compile_backend(CausalWan(net, cfg, compile=BACKEND)) == BACKEND
    assert compile_backend(None) is None
    both = compiled_models(CausalWan(net, cfg, compile=True), CausalWan(net, cfg, compile=BACKEND))
    assert both == {"target": "inductor", "drafter": BACKEND}
    assert compiled_line(both) == f"compiled: target (inductor), drafter ({BACKEND})"
    assert compiled_line({}) == "compiled: no (eager DiTs)"


def test_a_compiled_model_that_made_no_forward_is_not_reported(tmp_path):
    """A target-only run with a compiled drafter loaded: only the target ran, so only the target is listed."""
    m = tiny_models(seed=0, workdir=tmp_path)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 48, 32, 2, 1)
    engine = Engine(m.target, m.vae, m.drafter, None)
    state = engine.generate(spec, TargetOnly())
    rep = build_report(state, "t", engine.recipe, engine.recipe.plan.num_steps,
                       compiled={"target": "inductor", "drafter": "inductor"})
    assert rep.compiled is True and rep.compiled_models == {"target": "inductor"}
    assert json.loads(rep.to_json())["compiled"] is True and "compiled: target (inductor)" in rep.table()
    plain = build_report(state, "t", engine.recipe, engine.recipe.plan.num_steps)
    assert plain.compiled is False and json.loads(plain.to_json())["compiled"] is False


def test_demo_compile_flag_builds_compiled_models_and_report_json_says_so(tmp_path, capsys):
    assert demo_main(["--out", str(tmp_path / "c"), "--blocks", "2", "--quiet", "--policy", "stride",
                      "--compile", BACKEND]) == 0
    data = json.loads((tmp_path / "c" / "report.json").read_text())
    assert data["compiled"] is True and data["compiled_models"] == {"target": BACKEND, "drafter": BACKEND}
    assert f"compiled: target ({BACKEND}), drafter ({BACKEND})" in capsys.readouterr().out
    assert demo_main(["--out", str(tmp_path / "e"), "--blocks", "1", "--quiet", "--policy", "target-only"]) == 0
    data = json.loads((tmp_path / "e" / "report.json").read_text())
    assert data["compiled"] is False and data["compiled_models"] == {}
    assert "compiled: no (eager DiTs)" in capsys.readouterr().out
    assert demo_main(["--out", str(tmp_path / "x"), "--quiet", "--compile", "no_such_backend"]) == 2
    err = capsys.readouterr().err
    assert "--compile no_such_backend: not a torch.compile backend" in err and "nothing was loaded" in err


def test_eval_compile_flag_reaches_the_models_and_the_run_identity(tmp_path, monkeypatch):
    from sdvg_eval.eval import main as eval_main, parse_args, preflight
    from sdvg_eval.worker import ModelSetup, load_models

    assert parse_args(["--compile"]).compile is True and parse_args([]).compile is False
    drafter, target, _, _ = load_models(ModelSetup(tiny=True, compile=BACKEND))
    assert (drafter.compile, target.compile) == (BACKEND, BACKEND)
    assert ModelSetup(compile=True).identity()["compiled"] == "inductor"
    assert ModelSetup().identity()["compiled"] == "no"  # rows of compiled and eager runs are never mixed
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red fox in the snow\n")
    bad = preflight(parse_args(["--tiny", "--prompts", str(prompts), "--workers", "0", "--compile", "nope"]))
    assert any("--compile nope" in p for p in bad)
    monkeypatch.setenv("SDVG_EVAL_CODE_VERSION", "compile-flag-test")
    out = tmp_path / "ev"
    assert eval_main(["--tiny", "--prompts", str(prompts), "--workers", "0", "--blocks", "2", "--width", "48",
                      "--height", "32", "--configs", "target-only", "stride:k=2", "--compile", BACKEND,
                      "--out", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["identity"]["compiled"] == BACKEND
    assert f"compiled {BACKEND}" in (out / "summary.md").read_text()


def test_bench_compile_flag_says_compiled_in_json_and_table(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    bs = importlib.import_module("bench_scale")
    assert bs.parse_args(["--compile"]).compile is True and bs.parse_args([]).compile is False
    out = tmp_path / "b.json"
    assert bs.main(["--size", "tiny", "--blocks", "2", "--rounds", "1", "--configs", "stride:k=2", "--isolation", "none",
                    "--compile", BACKEND, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["compiled"] is True and doc["compiled_models"] == {"target": BACKEND, "drafter": BACKEND}
    assert f"compiled: target ({BACKEND}), drafter ({BACKEND})" in out.with_suffix(".md").read_text()
    assert [r["id"] for r in doc["rows"]] == ["stride:k=2"] and doc["rows"][0]["decisions"] == ["forced", "accepted"]
