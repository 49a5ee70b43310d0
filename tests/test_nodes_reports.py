"""What a run's report says across cancels and re-queues, against the fake host: a cancel between steps leaves no
interrupt behind, a report after a cancel and re-queue marks the blocks from the node cache as earlier runs', each
execution gets its own run id on both builds' execution contexts, and the report plot renders."""
from __future__ import annotations

import math

import pytest

import workflow_tools as wt
from mini_executor import MiniExecutor
from node_env import REPO, SMALL, api_for, env, node_of, report_of  # noqa: F401 (env: the fake host's fixture)


def test_cancel_between_steps(env):
    pack, classes = env
    import comfy.model_management as mm

    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, seed=11)
    pack.nodes.shared_memo.MEMO.clear()
    mm.interrupt_current_processing(True)
    with pytest.raises(mm.InterruptProcessingException):
        MiniExecutor(classes).run(api)
    assert not mm.processing_interrupted()


@pytest.mark.slow
def test_report_after_cancel_and_requeue_marks_node_cache_blocks(env):
    """Cancel before Finish, then queue again: the routes come from the executor's node cache (old run id), Finish
    runs now. Every block must say it was not computed by this execution, and the recomputed line must appear."""
    pack, classes = env
    pack.nodes.shared_memo.MEMO.clear()
    api = wt.set_inputs(api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes), "SDVGRoute", tau=-5.0)
    ex = MiniExecutor(classes)
    ex.run(api)
    first = report_of(pack, ex, api)
    assert all(b["computed_now"] for b in first["blocks"]) and first["blocks_from_earlier_runs"] == 0
    assert len({b["run_id"] for b in first["blocks"]}) == 1 and first["blocks"][0]["run_id"] == first["run_id"]
    # "Cancel" hit while SDVG Finish was running: its (and its viewers') results never reached the cache
    for key in [k for k in ex.cache if k[0] in ("SDVGFinish", "PreviewAny", "PreviewImage", "CreateVideo", "SaveVideo")]:
        del ex.cache[key]
    ui = ex.run(api)
    assert "SDVGFinish" in {c for _, c in ex.executed} and "SDVGRoute" not in {c for _, c in ex.executed}
    rep = report_of(pack, ex, api)
    n = SMALL["num_blocks"]
    assert rep["run_id"] != first["run_id"] and rep["blocks_from_earlier_runs"] == n
    assert not any(b["computed_now"] for b in rep["blocks"])
    assert (rep["recomputed_drafter_forwards"], rep["recomputed_target_forwards"]) == (0, 0)
    text = ui[node_of(api, "PreviewAny")]["text"][0]
    assert "this run recomputed drafter 0, target 0 forwards" in text
    assert f"* {n} block(s) were not computed by this run" in text
    rows = [r for r in map(str.split, text.splitlines()) if len(r) > 2 and r[0].isdigit() and r[1] in ("target", "drafter")]
    assert len(rows) == n and all("no" in r and "whole" in r for r in rows), rows


def test_run_id_from_either_builds_execution_context(env, monkeypatch):
    """The run id is the execution's id: ComfyUI 0.3.64 names it prompt_id, the pip-installable 0.12.1 build task_id.
    Two executions must get two ids on both (one shared fallback id made every re-queue look like a fresh run)."""
    from collections import namedtuple

    pack, _ = env
    rs = pack.nodes.session
    utils = __import__("comfy_execution.utils", fromlist=["x"])
    for field in ("prompt_id", "task_id"):
        ctx = namedtuple("Ctx", [field, "node_id", "list_index"])
        ids = []
        for run in ("run-a", "run-b"):
            monkeypatch.setattr(utils, "get_executing_context", lambda run=run: ctx(run, "7", None))
            ids.append((rs.current_run_id(), rs.node_run_id()))
        assert ids == [("run-a", "run-a#7"), ("run-b", "run-b#7")], field
    monkeypatch.setattr(utils, "get_executing_context", lambda: None)
    assert rs.current_run_id() == rs.current_run_id() != "run-b"  # outside an execution: one id per process


def test_report_plot_renders(env):
    pack, _ = env
    core = pack.sdvg_core
    plot = __import__(core.__name__ + ".engine.plot", fromlist=["x"])
    report = __import__(core.__name__ + ".engine.report", fromlist=["x"])
    blocks = [report.BlockReport(0, "target", "forced", None, [], {}, {}, {}, []),
              report.BlockReport(1, "drafter", "accepted", 0.4, [0.4, 0.9], {}, {}, {}, []),
              report.BlockReport(2, "target", "rejected", -1.2, [-1.2, 0.1], {}, {}, {}, [])]
    rep = report.RunReport("threshold tau=-0.7", "krea", 3, blocks, 0.5, 1 / 3, 10, 20, 10, 20, 7.4, 158.0, 200.0, 1.27)
    img = plot.render_report_plot(rep, -0.7)
    assert img.size == (640, 360) and img.mode == "RGB"
    colors = {c for _, c in img.getcolors(1 << 20)}
    assert {plot.COLORS["drafter"], plot.COLORS["target"], plot.COLORS["forced"], plot.COLORS["tau"]} <= colors
    assert math.isfinite(rep.counted_speedup)
