"""StrideAR as a baseline: the target makes every k-th block (block 0 included), the drafter the
rest, and nothing is decoded or scored for routing. The policy's rule, the engine's work and counted speedup under
it, the eval's `stride:k=K` configs, their own Pareto series and the equal-cost comparison with SDVG's tau curve.
"""
from __future__ import annotations

import json

import pytest
from PIL import Image

from sdvg_core import (Engine, EngineConfig, GenerationSpec, KreaRecipe, PromptConditioning, SelfForcingRecipe,
                       StridePolicy, TargetOnly, build_report, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT
from sdvg_core.engine.report import DEFAULT_COST_RATIO
from sdvg_core.io.text import demo_embeddings
from sdvg_eval.config import STRIDE_KIND, parse_config, parse_configs
from sdvg_eval.equal_cost import equal_cost, equal_cost_lines
from sdvg_eval.report import (PLOT_BOX, PLOT_SIZE, PNG_KEY, SERIES_STYLES, TITLE_Y, layout, markdown, plot_points,
                              render_plot, summarise)

W, H = 48, 32


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


def _spec(blocks: int) -> GenerationSpec:
    return GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), W, H, blocks, 42)


# ------------------------------------------------------------------------------------------------ the policy
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_target_makes_block_0_and_every_kth_block_and_nothing_is_scored(k):
    p = StridePolicy(k)
    for b in range(13):
        assert p.forced(b) == (b % k == 0), (k, b)  # forced: the engine drafts nothing for a target block
        assert p.accept(b, None) == (b % k != 0) and p.accept(b, 99.0) == p.accept(b, -99.0)  # score-blind
        assert p.needs_score(b) is False
    assert p.forced(0) and f"k={k}" in p.describe() and "no scorer" in p.describe()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_k_is_validated(bad):
    with pytest.raises(ValueError, match="stride k must be an integer >= 1"):
        StridePolicy(bad)


# ------------------------------------------------------------------------------------------------ the engine
class Counted:
    """Counts the calls of an engine's decode/score operations and of the scorer itself."""

    def __init__(self, engine: Engine):
        self.calls = {"decode_draft": 0, "score_draft": 0, "score_frames": 0}
        for name in ("decode_draft", "score_draft"):
            self._wrap(engine, name)
        self._wrap(engine.scorer, "score_frames")

    def _wrap(self, obj, name: str) -> None:
        fn = getattr(obj, name)

        def counted(*a, **kw):
            self.calls[name] += 1
            return fn(*a, **kw)

        setattr(obj, name, counted)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [KreaRecipe(), SelfForcingRecipe()], ids=lambda r: r.name)
def test_engine_runs_the_rule_without_decoding_or_scoring_a_draft(models, recipe):
    k, n = 2, 5
    engine = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(recipe=recipe))
    counted = Counted(engine)
    state = engine.generate(_spec(n), StridePolicy(k))
    try:
        assert counted.calls == {"decode_draft": 0, "score_draft": 0, "score_frames": 0}
        assert [r.producer for r in state.blocks] == ["target" if b % k == 0 else "drafter" for b in range(n)]
        assert [r.decision for r in state.blocks] == ["forced" if b % k == 0 else "accepted" for b in range(n)]
        for r in state.blocks:
            assert r.work["scored_frames"] == 0 and r.score is None and r.frame_scores == ()
            if r.producer == "target":  # never drafted: no drafter forward in a target block
                assert r.work["drafter_forwards"] == 0 and r.work["target_forwards"] > 0
            else:
                assert r.work["target_forwards"] == 0 and r.work["drafter_forwards"] > 0
        # the only decodes are the commits' (one per committed frame), as in a target-only run
        only = Engine(models.target, models.vae, None, None, EngineConfig(recipe=recipe)).generate(_spec(n), TargetOnly())
        assert (sum(r.work["vae_decode_frames"] for r in state.blocks)
                == sum(r.work["vae_decode_frames"] for r in only.blocks))
    finally:
        for name in ("decode_draft", "score_draft"):
            engine.__dict__.pop(name, None)
        models.scorer.__dict__.pop("score_frames", None)


@pytest.mark.slow
def test_counted_speedup_k2_over_9_blocks_is_the_forward_arithmetic(models):
    """Krea: a block costs S steps plus one context rebuild after block 0, whoever makes it. k=2 over 9 blocks: the
    target makes 0, 2, 4, 6, 8 (S + 4 (S + 1) forwards), the drafter 1, 3, 5, 7 (4 (S + 1)); target-only costs
    9 S + 8 target forwards. With S = 5 (4 steps + the near-identity call): 7.4 x 53 / (24 + 7.4 x 29) = 1.6438x."""
    engine = Engine(models.target, models.vae, models.drafter, models.scorer, EngineConfig(recipe=KreaRecipe()))
    state = engine.generate(_spec(9), StridePolicy(2))
    steps = engine.recipe.plan.num_steps
    rep = build_report(state, StridePolicy(2).describe(), engine.recipe, steps)
    t_fw, d_fw = steps + 4 * (steps + 1), 4 * (steps + 1)
    assert (rep.target_forwards, rep.drafter_forwards) == (t_fw, d_fw)
    assert rep.target_only_cost == pytest.approx(DEFAULT_COST_RATIO * (9 * steps + 8))
    assert rep.counted_cost == pytest.approx(d_fw + DEFAULT_COST_RATIO * t_fw)
    assert rep.counted_speedup == pytest.approx(DEFAULT_COST_RATIO * (9 * steps + 8) / (d_fw + DEFAULT_COST_RATIO * t_fw))
    assert steps == 5 and rep.counted_speedup == pytest.approx(392.2 / 238.6)
    assert rep.acceptance_blocks_1_to_n == pytest.approx(4 / 8)


def test_report_plot_says_why_a_stride_run_has_no_bars(models):
    """report.png of a score-blind run: the note names the policy instead of leaving an empty score axis."""
    from sdvg_core import render_report_plot
    from sdvg_core.engine.plot import _note

    engine = Engine(models.target, models.vae, models.drafter, None, EngineConfig())
    state = engine.generate(_spec(3), StridePolicy(2))
    rep = build_report(state, StridePolicy(2).describe(), engine.recipe, engine.recipe.plan.num_steps)
    assert _note(rep, None) == "stride k=2: no block was scored, the policy routes without ImageReward (no bars)"
    assert render_report_plot(rep, None).size == (640, 360)


# ------------------------------------------------------------------------------------------------ the eval's configs
def test_eval_parses_stride_configs_and_refuses_k_below_1():
    c = parse_config("stride:k=3")
    assert (c.kind, c.value, c.needs_drafter, c.needs_scorer) == (STRIDE_KIND, 3.0, True, False)
    assert c.policy(0, 42) == StridePolicy(3)
    for name in ("stride:k=0", "stride:k=-2"):
        with pytest.raises(ValueError, match=r"k must be an integer >= 1 \(the target makes blocks 0, k, 2k"):
            parse_config(name)
    with pytest.raises(ValueError, match="whole number"):
        parse_config("stride:k=2.5")
    assert parse_config("stride:2").policy(0, 42) == StridePolicy(2)  # the bare value, as sdvg:-0.7
    assert [x.name for x in parse_configs(["stride:k=2", "target-only", "stride:k=2"])] == ["target-only", "stride:k=2"]


def test_eval_preflight_names_a_bad_stride():
    from sdvg_eval.eval import parse_args, preflight

    problems = preflight(parse_args(["--tiny", "--prompts", __file__, "--workers", "0", "--configs", "stride:k=0"]))
    assert any("stride:k=0" in p and "k must be an integer >= 1" in p for p in problems), problems


# ------------------------------------------------------------------------------------------------ summary and plot
def _rows(points: dict[str, tuple[float, float]], prompts: int = 2) -> list[dict]:
    """Synthetic rows.csv rows: per config (counted speedup, metric); target-only costs 100 per video."""
    rows = []
    for name, (speedup, vr) in points.items():
        for p in range(prompts):
            rows.append({"config": name, "prompt": str(p), "seed": "42", "vr": repr(vr), "time_s": "1.0",
                         "fresh_time": "1", "target_only_cost": "100.0", "counted_cost": repr(100.0 / speedup),
                         "b1": "1", "b2": "0"})
    return rows


POINTS = {"target-only": (1.0, 0.0788), "sdvg:-0.7": (1.25, 0.0780), "sdvg:-1.5": (2.5, 0.0740),
          "sdvg:-inf": (2.5, 0.0700), "stride:k=2": (2.0, 0.0720), "stride:k=3": (3.0, 0.0690)}


def test_equal_cost_interpolates_sdvg_on_its_tau_curve():
    """stride:k=2 at 2.0x (cost 0.5): between sdvg:-1.5 (cost 0.4) and sdvg:-0.7 (cost 0.8), a quarter of the way
    from -1.5: 0.0740 + 0.25 (0.0780 - 0.0740) = 0.0750. sdvg:-inf has -1.5's cost and a lower value: the curve's
    upper edge counts. stride:k=3 (3.0x) lies beyond the curve: no value, said so."""
    summ = summarise(_rows(POINTS), ["vr"])
    eq = {e.stride: e for e in equal_cost(summ, ["vr"])}
    assert set(eq) == {"stride:k=2", "stride:k=3"}
    k2 = eq["stride:k=2"]
    assert k2.speedup == pytest.approx(2.0) and k2.stride_value == pytest.approx(0.0720)
    assert k2.sdvg_value == pytest.approx(0.0750) and k2.difference == pytest.approx(0.0030)
    assert k2.between == ("sdvg:-1.5", "sdvg:-0.7")
    assert eq["stride:k=3"].sdvg_value is None and eq["stride:k=3"].curve_range == pytest.approx((1.25, 2.5))
    text = "\n".join(equal_cost_lines(list(eq.values())))
    assert "| stride:k=2 | 2.00x | vr | 0.0720 | 0.0750 | +0.0030 | sdvg:-1.5 .. sdvg:-0.7 |" in text
    assert "| stride:k=3 | 3.00x | vr | 0.0690 | - | - | outside the tau curve (1.25x..2.50x)" in text
    md = markdown(summ, ["vr"], [], {})
    assert "## SDVG vs StrideAR at equal counted cost" in md and "+0.0030" in md
    # at a tau's own cost the value is that tau's, exactly
    exact = summarise(_rows({**POINTS, "stride:k=2": (1.25, 0.0700)}), ["vr"])
    e = next(x for x in equal_cost(exact, ["vr"]) if x.stride == "stride:k=2")
    assert e.sdvg_value == pytest.approx(0.0780) and e.between == ("sdvg:-0.7",)
    assert "StrideAR" not in markdown(summarise(_rows({"target-only": (1.0, 0.08), "sdvg:-1": (2.0, 0.07)}), ["vr"]),
                                      ["vr"], [], {})


@pytest.mark.parametrize("use_matplotlib", [False, True], ids=["pil", "matplotlib"])
def test_pareto_plot_draws_stride_as_its_own_series(tmp_path, use_matplotlib):
    if use_matplotlib:
        pytest.importorskip("matplotlib", reason="matplotlib not installed (requirements-eval.txt)")
    data = plot_points(summarise(_rows(POINTS), ["vr"]), "vr")
    assert [p[2] for p in data["curves"][STRIDE_KIND]] == ["stride:k=2", "stride:k=3"]  # sorted by speedup
    assert [p[0] for p in data["curves"][STRIDE_KIND]] == pytest.approx([2.0, 3.0])  # the counted-speedup axis
    assert all(not p[2].startswith("stride") for p in data["points"]) and "stride:k=2" not in str(data["curves"]["sdvg"])
    color, shape = SERIES_STYLES[STRIDE_KIND]
    items = {it["name"]: it for it in layout(data)}
    assert {items[n]["shape"] for n in ("stride:k=2", "stride:k=3")} == {shape}
    assert {items[n]["color"] for n in ("stride:k=2", "stride:k=3")} == {color}
    assert items["sdvg:-0.7"]["shape"] != shape and items["sdvg:-0.7"]["color"] != color
    img = Image.open(render_plot(data, tmp_path / "p.png", use_matplotlib=use_matplotlib))
    drawn = json.loads(img.text[PNG_KEY])
    assert STRIDE_KIND in drawn["curves"]
    rgb = img.convert("RGB")
    want = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
    for n in ("stride:k=2", "stride:k=3"):  # each triangle painted in the series' colour at its marker
        it = items[n]
        got = rgb.getpixel((round(it["mx"]), round(it["my"])))
        assert max(abs(a - b) for a, b in zip(got, want)) < 40, (n, got)
    # the legend (on the title line, right of the title) has an entry in the series' colour
    width = PLOT_SIZE[0]
    band = [rgb.getpixel((x, y)) for x in range(width // 2, width - PLOT_BOX[1] + 20) for y in range(TITLE_Y - 6, TITLE_Y + 6)]
    assert sum(max(abs(a - b) for a, b in zip(p, want)) < 40 for p in band) > 60  # line, marker, text (line alone ~30)
