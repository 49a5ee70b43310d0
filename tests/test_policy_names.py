"""The one grammar of routing policies (sdvg_core/engine/policy_names.py): every front end names a policy with it, and
nothing else turns a name into a policy or patches tau into a report."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from sdvg_core import (DraftOnly, EngineConfig, LongLiveRecipe, RandomPolicy, StridePolicy, TargetOnly, ThresholdPolicy,
                       parse_policy, policy_by_name)
from sdvg_core.engine.policy import DEFAULT_STRIDE_K, DEFAULT_TAU, FixedPattern
from sdvg_core.engine.policy_names import (DEFAULT_RANDOM_P, LEGACY_POLICY_NAMES, POLICY_KINDS, PolicyNameError,
                                           spec_of)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name, policy", [
    ("sdvg", ThresholdPolicy(DEFAULT_TAU)),
    ("sdvg:tau=-1.5", ThresholdPolicy(-1.5)),
    ("sdvg:-1.5", ThresholdPolicy(-1.5)),  # the evaluation's first spelling
    ("sdvg-mean:tau=-0.7", ThresholdPolicy(-0.7, "mean")),
    ("sdvg:tau=inf", ThresholdPolicy(math.inf)),
    ("target-only", TargetOnly()),
    ("draft-only", DraftOnly(force_reject_first=False)),
    ("accept-all", DraftOnly(force_reject_first=True)),
    ("random", RandomPolicy(DEFAULT_RANDOM_P)),
    ("random:p=0.5", RandomPolicy(0.5)),
    ("random:0.5", RandomPolicy(0.5)),
    ("stride", StridePolicy(DEFAULT_STRIDE_K)),
    ("stride:k=3", StridePolicy(3)),
    (" stride:k=3 ", StridePolicy(3)),
])
def test_each_name_means_one_policy(name, policy):
    assert policy_by_name(name) == policy


@pytest.mark.parametrize("old, new", sorted(LEGACY_POLICY_NAMES.items()))
def test_saved_workflows_old_values_read_through_the_table(old, new):
    assert parse_policy(old) == parse_policy(new)


def test_canonical_names_read_back_as_themselves():
    for name in ("sdvg:tau=-0.7", "sdvg-mean:tau=-1.5", "target-only", "draft-only", "accept-all", "random:p=0.73",
                 "stride:k=2"):
        spec = parse_policy(name)
        assert spec.name == name and parse_policy(spec.name) == spec
        assert spec_of(spec.policy()) == spec  # the report names a Policy object in the same grammar
    assert spec_of(FixedPattern((False, True))) is None
    assert set(POLICY_KINDS) == {"sdvg", "sdvg-mean", "target-only", "draft-only", "accept-all", "random", "stride"}


def test_tau_given_apart_and_force_reject_first():
    assert policy_by_name("sdvg", tau=-2.0) == ThresholdPolicy(-2.0)
    assert policy_by_name("sdvg:tau=-2", tau=-2.0) == ThresholdPolicy(-2.0)  # the same tau twice is fine
    with pytest.raises(PolicyNameError, match="states tau -1 and tau -2 is also given"):
        parse_policy("sdvg:tau=-1", tau=-2.0)
    assert policy_by_name("stride:k=2", tau=-2.0) == StridePolicy(2)  # a slider's tau is not the stride's business
    assert policy_by_name("sdvg", default_tau=-0.8) == ThresholdPolicy(-0.8)
    assert policy_by_name("sdvg", force_reject_first=False) == ThresholdPolicy(DEFAULT_TAU, force_reject_first=False)
    assert policy_by_name("draft-only", force_reject_first=True) == DraftOnly(force_reject_first=True)
    assert policy_by_name("random:p=0.5", seed=7) == RandomPolicy(0.5, seed=7)


@pytest.mark.parametrize("bad, words", [
    ("sdvg:tau=nan", "not a number"), ("sdvg:tau=x", "tau must be a number"), ("stride:k=0", "k must be an integer >= 1"),
    ("stride:k=2.5", "k must be a whole number"), ("stride:tau=2", "stride takes k=..."), ("random:p=1.5", "[0, 1]"),
    ("target-only:k=2", "takes no parameter"), ("stride_k9", "unknown policy"), ("sdvg:k=2", "sdvg takes tau="),
    ("", "unknown policy"),
])
def test_bad_names_are_refused_with_the_grammar(bad, words):
    with pytest.raises(PolicyNameError) as e:
        parse_policy(bad)
    assert words in str(e.value)


def test_what_a_policy_needs_is_the_policy_s_to_say():
    assert (ThresholdPolicy(-0.7).uses_drafter, ThresholdPolicy(-0.7).uses_scorer) == (True, True)
    assert (ThresholdPolicy(math.inf).uses_drafter, ThresholdPolicy(math.inf).uses_scorer) == (False, False)
    assert (ThresholdPolicy(-math.inf).uses_drafter, ThresholdPolicy(-math.inf).uses_scorer) == (True, False)
    assert (TargetOnly().uses_drafter, StridePolicy(1).uses_drafter, StridePolicy(2).uses_drafter) == (False, False, True)
    assert not any(p.uses_scorer for p in (TargetOnly(), DraftOnly(), RandomPolicy(0.5), StridePolicy(2)))
    assert FixedPattern((False, True)).uses_scorer and not FixedPattern((False, True), score_drafts=False).uses_scorer


def test_the_auto_recipe_rule_is_the_config_builder_s():
    c = EngineConfig.for_run("krea", drafter_kind="longlive")
    assert c.recipe_for("drafter") == LongLiveRecipe() and c.recipe_for("target").name == "krea"
    assert EngineConfig.for_run("krea", drafter_kind="self_forcing").recipe_for("drafter").name == "krea"
    assert EngineConfig.for_run("krea", "self_forcing", drafter_kind="longlive").recipe_for("drafter").name == "self_forcing"
    assert EngineConfig.for_run("krea", target_recipe="self_forcing").recipe_for("target").name == "self_forcing"
    assert EngineConfig.for_run("self_forcing", drafter_kind=None).recipe_for("drafter").name == "self_forcing"
    with pytest.raises(ValueError, match="decode_rule"):
        EngineConfig.for_run("krea", decode_rule="bogus")


# ----------------------------------------------------------------------------------------------- one place
FRONT_ENDS = [*sorted((REPO / "nodes").glob("*.py")), *sorted((REPO / "sdvg_core" / "demo").glob("*.py")),
              *sorted((REPO / "sdvg_eval").glob("*.py")), *sorted((REPO / "bench").glob("*.py"))]
POLICY_CLASSES = {"ThresholdPolicy", "TargetOnly", "DraftOnly", "RandomPolicy", "StridePolicy"}


def policies_built(source: str) -> list[str]:
    """The routing policies a front end builds itself (a call of a policy class), instead of naming one."""
    return [f"line {n.lineno}: {n.func.id}(...)" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in POLICY_CLASSES]


def test_no_front_end_builds_a_policy_from_a_name_itself():
    """The command line, the nodes, the evaluation and the benchmarks name policies in the grammar; none builds a
    policy class by itself (the benchmarks' decision patterns are FixedPattern, not a policy name)."""
    found = {str(p.relative_to(REPO)): policies_built(p.read_text()) for p in FRONT_ENDS}
    assert not {k: v for k, v in found.items() if v}
    assert policies_built("p = StridePolicy(int(k))\nq = FixedPattern((True,))") == ["line 1: StridePolicy(...)"]


def test_nothing_patches_tau_into_a_report_and_nodes_do_not_import_the_command_line():
    for p in FRONT_ENDS:
        text = p.read_text()
        assert 'setdefault("tau"' not in text, p
        if p.parent.name == "nodes":  # the command line is not a library of the nodes (a tooltip may name a command)
            imported = [n.module or "" for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)]
            assert not [m for m in imported if m.startswith("sdvg_core.demo") or ".demo" in m or m == "demo"], p


def test_one_table_of_dtype_names():
    """The dtype names every front end spells (`--dtype bf16`, a loader's weight_dtype) come from one table
    (models/dtypes.py); a benchmark may take a subset of it, never write its own."""
    own = []
    for p in [*FRONT_ENDS, *sorted((REPO / "sdvg_core").rglob("*.py"))]:
        for n in ast.walk(ast.parse(p.read_text())):
            if (isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Dict)
                    and any(isinstance(v, ast.Attribute) and v.attr in ("bfloat16", "float16") for v in n.value.values)):
                own.append(f"{p.relative_to(REPO)}:{n.lineno}")
    assert own == ["sdvg_core/models/dtypes.py:7"], own
