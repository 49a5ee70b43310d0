"""scripts/check_mutations.py stays honest: every mutation's text, and every test it names, is in the tree (checked
on every test run, so a change that moves an anchor or a test fails here, not months later), and a stale mutation
fails the script before any test runs instead of being skipped (G14's anchor went stale unnoticed once: its old text
is the example below)."""
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


def test_every_test_a_mutation_names_is_in_the_tree(cm):
    """Each mutation's own tests and the default ones are existing files and, where a test id is named, existing test
    functions: after tests move or are renamed, a mutation must not run pytest on a path it cannot find."""
    assert cm.missing_tests(cm.all_mutations(REPO), REPO) == []
    assert any("::" in t for m in cm.all_mutations(REPO) for t in m.tests)  # test ids are checked, not only files


def test_a_mutation_naming_a_moved_test_fails_the_script_before_any_test(cm, monkeypatch, capsys):
    """A test file that is gone (split into others) or a test function renamed makes the mutation stale: the anchor
    check and the run both exit 1 naming it, and no test runs (pytest's "not found" would read as caught)."""
    moved = cm.Mutation("Z4", cm.POLICY, "a test file split into others", "score >= self.tau", "score > self.tau",
                        tests=("tests/test_nodes.py",))
    renamed = cm.Mutation("Z5", cm.POLICY, "a test function renamed", "score >= self.tau", "score > self.tau",
                          tests=("tests/test_rules.py::test_a_name_no_test_has",))
    param = cm.Mutation("Z6", cm.POLICY, "a parametrised id of an existing test", "score >= self.tau",
                        "score > self.tau", tests=("tests/test_rules.py::test_engine_rejects_a_block_with_one_bad_frame[x]",))
    assert cm.stale([moved, renamed, param], REPO) == []  # their code anchors are fine: only the tests moved
    missing = cm.missing_tests([moved, renamed, param], REPO)
    assert [s.split(":")[0] for s in missing] == ["Z4", "Z5"], missing
    assert "the test file is gone" in missing[0] and "no test function 'test_a_name_no_test_has'" in missing[1]
    assert cm.missing_tests([cm.MUTATIONS[0]], REPO, ("tests/test_gone.py",)) == [
        f"{cm.MUTATIONS[0].id}: tests/test_gone.py: the test file is gone"]  # the defaults (--tests) are checked too
    monkeypatch.setattr(cm, "MUTATIONS", cm.MUTATIONS + [moved])
    assert cm.main(["--anchors-only"]) == 1 and "stale: Z4: tests/test_nodes.py" in capsys.readouterr().out
    monkeypatch.setattr(cm, "run_tests", lambda *a: pytest.fail("a test ran for a mutation naming a missing test"))
    assert cm.main(["--only", "Z4"]) == 1 and "Z4: tests/test_nodes.py" in capsys.readouterr().err
    assert cm.main(["--only", "P1", "--tests", "tests/test_nodes.py"]) == 1
    assert "P1: tests/test_nodes.py: the test file is gone" in capsys.readouterr().err


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
