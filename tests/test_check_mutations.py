"""scripts/check_mutations.py stays honest: every mutation's text is in the tree (checked on every test run, so a
change that moves an anchor fails here, not months later), and a stale mutation fails the script before any test runs
instead of being skipped (G14's anchor went stale unnoticed once: its old text is the example below)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cm():
    spec = importlib.util.spec_from_file_location("check_mutations", REPO / "scripts" / "check_mutations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_every_mutation_applies_to_the_tree(cm):
    assert cm.stale(cm.all_mutations(REPO), REPO) == []
    assert len(cm.all_mutations(REPO)) > len(cm.MUTATIONS)  # the memo-key field mutations are generated too


def test_a_stale_mutation_fails_the_script_before_any_test(cm, monkeypatch, capsys):
    gone = cm.Mutation("Z1", cm.DEMO_RUN, "the demo's video does not begin with the given frames (an old anchor)",
                       "if st.next_block == 1:  # the video begins", "if False:  # the video begins")
    moved = cm.Mutation("Z2", "sdvg_core/engine/pixel_input.py", "a file that moved", "return", "pass")
    twice = cm.Mutation("Z3", cm.POLICY, "text that is in the file more than once", "return", "pass")
    assert [s.split(":")[0] for s in cm.stale([gone, moved, twice], REPO)] == ["Z1", "Z2", "Z3"]
    monkeypatch.setattr(cm, "MUTATIONS", cm.MUTATIONS + [gone])
    assert cm.main(["--anchors-only"]) == 1 and "stale: Z1: sdvg_core/demo/to_file.py" in capsys.readouterr().out
    monkeypatch.setattr(cm, "run_tests", lambda *a: pytest.fail("a test ran for a stale mutation"))
    assert cm.main(["--only", "Z1", "P1"]) == 1
    assert "Z1" in capsys.readouterr().err
