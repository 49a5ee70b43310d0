"""The calibration run and command: the same drafts scored through the full VAE and a tiny decoder, each from its own
memory of the committed blocks, along the full VAE's decisions; the command writes its JSON and plot."""
from __future__ import annotations

import json

import pytest
import torch

from sdvg_core import (Engine, EngineConfig, FixedPattern, GenerationSpec, PromptConditioning, ThresholdPolicy,
                       TieredMemo, tiny_models)
from sdvg_core.demo import calibrate as cal_cli
from sdvg_core.demo.tiny_taehv import tiny_taehv
from sdvg_core.engine.calibration_run import paired_scores

TAU = -0.1  # at this size and prompt the tiny scorer accepts the first drafts and rejects the last


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(seed: int = 42) -> GenerationSpec:
    emb = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(2))
    return GenerationSpec(PromptConditioning.make("a red fox in the snow", emb), 48, 32, 5, seed)


@pytest.mark.slow
def test_paired_scores_are_each_decoders_own_scores_on_the_full_vaes_history(models):
    """The reference scores are the default engine's at tau; the candidate scores are what an engine routing on the tiny
    decoder scores for the same drafts after the same committed blocks (its decisions forced to the reference's)."""
    taehv = tiny_taehv(seed=3)
    memo = TieredMemo.split(256 << 20)
    ref = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo)
    cand = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo, route_vae=taehv)
    policy = ThresholdPolicy(tau=TAU)
    state, paired = paired_scores(ref, cand, _spec(), policy)
    plain = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig()).generate(_spec(), policy)
    assert [b.decision for b in state.blocks] == [b.decision for b in plain.blocks]
    assert {"accepted", "rejected"} <= {b.decision for b in paired}  # both kinds of history
    assert [p.reference_frames for p in paired] == [b.frame_scores for b in plain.blocks[1:]]
    assert [p.decision for p in paired] == [b.decision for b in plain.blocks[1:]]
    pattern = FixedPattern(tuple(b.decision == "accepted" for b in plain.blocks))
    routed = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(),
                    route_vae=taehv).generate(_spec(), pattern)
    assert [p.candidate_frames for p in paired] == [b.frame_scores for b in routed.blocks[1:]]
    assert [p.candidate for p in paired] == [min(b.frame_scores) for b in routed.blocks[1:]]
    assert all(p.reference_decode_s > 0 and p.candidate_decode_s > 0 and p.candidate_score_s > 0 for p in paired)
    assert torch.equal(state.committed_latents(), plain.committed_latents())  # the reference's video, untouched


def test_paired_scores_refuses_engines_that_do_not_pair(models):
    memo = TieredMemo.split(1 << 20)
    ref = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(), memo=memo)
    with pytest.raises(ValueError, match="same decoder"):
        paired_scores(ref, Engine(models.target, models.vae, models.drafter, models.scorer, memo=memo), _spec(),
                      ThresholdPolicy(tau=TAU))
    other = Engine(models.target, models.vae, models.drafter, models.scorer, route_vae=tiny_taehv(1))
    with pytest.raises(ValueError, match="share one memo"):
        paired_scores(ref, other, _spec(), ThresholdPolicy(tau=TAU))


@pytest.mark.slow
def test_the_command_writes_the_calibration_and_its_plot(tmp_path, capsys):
    out = tmp_path / "cal"
    assert cal_cli.main(["--blocks", "3", "--seeds", "42,43", "--prompt", "a red fox", "--out", str(out),
                         "--quiet", "--taus=-0.9,-0.8"]) == 0
    doc = json.loads((out / cal_cli.CALIBRATION_JSON).read_text())
    assert (out / cal_cli.CALIBRATION_PNG).stat().st_size > 0
    assert doc["reference_decoder"] == "wan_vae" and doc["candidate_decoder"] == "taehv:tiny-taehv"
    assert doc["blocks"] == 4 and len(doc["runs"]) == 2  # 2 seeds x blocks 1-2
    c = doc["calibration"]
    assert [t["tau"] for t in c["taus"]] == [-0.9, -0.8] and len(c["reference"]) == len(c["candidate"]) == 4
    assert c["reference"] == [b["reference"] for r in doc["runs"] for b in r["blocks"]]
    assert set(doc["overhead_per_block"]) == {"reference", "candidate"}
    assert "says nothing about real weights" in doc["models"] and doc["commit"] and doc["command"].startswith(
        "python -m sdvg_core.demo.calibrate")
    assert "matched tau" in capsys.readouterr().out


def test_the_command_refuses_what_it_cannot_run_before_loading(tmp_path, capsys):
    assert cal_cli.main(["--target", str(tmp_path / "t.safetensors"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--route-vae FILE is missing" in err and "nothing was loaded" in err
    assert cal_cli.main(["--route-vae", str(tmp_path / "none.pth"), "--out", str(tmp_path / "o")]) == 2
    assert "--route-vae" in capsys.readouterr().err
