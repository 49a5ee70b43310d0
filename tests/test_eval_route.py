"""The evaluation with a tiny routing decoder: `sdvg:TAU@route` routes on it (a curve of its own on the Pareto plot),
`sdvg:TAU@calibrate` routes on the full VAE and scores every draft through both (calibration.json / .png and a
summary section); rows name their routing decoder."""
from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from sdvg_core import Engine, EngineConfig, GenerationSpec, PromptConditioning, ThresholdPolicy, tiny_models
from sdvg_core.demo.route_args import TINY_ROUTE_SEED
from sdvg_core.demo.tiny_taehv import tiny_taehv
from sdvg_core.io.text import demo_embeddings
from sdvg_eval.config import parse_config
from sdvg_eval.eval import main
from sdvg_eval.records import read_rows
from sdvg_eval.report import CALIBRATION_FILE, CALIBRATION_PLOT, PNG_KEY

pytestmark = pytest.mark.slow  # eval sweeps with a routing decoder

PROMPT = "a red fox jumps over a frozen creek at dawn"
TAU = -0.1  # the tiny scorer at 48x32 accepts the first drafts of this prompt and rejects others (both kinds seen)
CONFIGS = ["target-only", f"sdvg:{TAU}", f"sdvg:{TAU}@route", f"sdvg:{TAU}@calibrate"]


def test_config_names_take_a_router_after_at():
    c = parse_config("sdvg:-0.7@route")
    assert (c.kind, c.value, c.router, c.series) == ("sdvg", -0.7, "route", "sdvg@route")
    assert parse_config("sdvg:-0.7").series == "sdvg" and parse_config("sdvg:-0.7@calibrate").router == "calibrate"
    with pytest.raises(ValueError, match="after '@'"):
        parse_config("sdvg:-0.7@tiny")
    with pytest.raises(ValueError, match="scores nothing"):
        parse_config("target-only@route")


def test_a_routed_config_needs_a_tiny_decoder_before_anything_loads(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text(PROMPT + "\n")
    assert main(["--prompts", str(prompts), "--target", "t", "--vae", "v", "--drafter", "d", "--reward", "r",
                 "--umt5", "u", "--configs", "sdvg:-0.7@route", "--workers", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--route-vae FILE is missing" in capsys.readouterr().err


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval_route")
    prompts = d / "prompts.txt"
    prompts.write_text(PROMPT + "\n")
    out = d / "out"
    assert main(["--tiny", "--prompts", str(prompts), "--configs", *CONFIGS, "--width", "48", "--height", "32",
                 "--blocks", "4", "--workers", "0", "--out", str(out)]) == 0
    return out


def test_rows_name_their_router_and_route_as_an_engine_would(sweep):
    rows = {r["config"]: r for r in read_rows(sweep / "rows.csv")}
    assert rows[f"sdvg:{TAU}"]["route_decoder"] == "wan_vae" and rows[f"sdvg:{TAU}@route"]["route_decoder"] == \
        "taehv:tiny-taehv"
    # the @route row's scores are an engine's routing on the tiny decoder
    m = tiny_models(seed=0)
    spec = GenerationSpec(PromptConditioning.make(PROMPT, demo_embeddings(PROMPT, 32)), 48, 32, 4, 42)
    want = Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(),
                  route_vae=tiny_taehv(TINY_ROUTE_SEED)).generate(spec, ThresholdPolicy(tau=TAU))
    assert [float(rows[f"sdvg:{TAU}@route"][f"s{b}"]) for b in (1, 2, 3)] == [b.score for b in want.blocks[1:]]
    # the @calibrate row is the full VAE's run (the same video as sdvg:TAU), its drafts scored by both decoders
    cal, plain = rows[f"sdvg:{TAU}@calibrate"], rows[f"sdvg:{TAU}"]
    assert cal["frames_digest"] == plain["frames_digest"]
    paired = json.loads(cal["paired"])
    assert paired["decoder"] == "taehv:tiny-taehv"
    assert [p[0] for p in paired["pairs"]] == [float(plain[f"s{b}"]) for b in (1, 2, 3)]
    assert plain["paired"] == ""



def test_the_report_draws_the_tiny_router_as_its_own_curve_and_writes_the_calibration(sweep):
    data = json.loads(Image.open(sweep / "pareto.png").text[PNG_KEY])
    names = {name: kind for kind, pts in data["curves"].items() for _, _, name in pts}
    assert names[f"sdvg:{TAU}@route"] == "sdvg@route" and names[f"sdvg:{TAU}"] == "sdvg"
    assert f"sdvg:{TAU}@calibrate" not in names  # the full VAE's run again: not a point of its own
    doc = json.loads((sweep / CALIBRATION_FILE).read_text())
    c = doc["calibration"]
    assert doc["candidate_decoder"] == "taehv:tiny-taehv" and c["blocks"] == 3
    assert [t["tau"] for t in c["taus"]] == [TAU] and doc["calibrate_taus"] == [TAU]
    assert (sweep / CALIBRATION_PLOT).stat().st_size > 0
    summary = (sweep / "summary.md").read_text()
    assert "Routing decoder calibration (taehv:tiny-taehv" in summary and "matched tau" in summary
