"""The step-by-step loop (sdvg_loop_step_by_step.json) on tiny models against the fake host: lazy draft/decode/score
nodes (block 0 never drafted), a re-queue with a moved tau recomputes only from the flipped block and equals a fresh
run, SDVG Route scoring by itself, and the loop nodes' checks of their inputs."""
from __future__ import annotations

import pytest
import torch

import workflow_tools as wt
from mini_executor import MiniExecutor
from node_env import EMB_FILE, PROMPT, REPO, SMALL, api_for, env, node_of, report_of  # noqa: F401 (env: fixture)


@pytest.mark.slow
def test_loop_workflow_lazy_and_requeue(env):
    pack, classes = env
    memo = pack.nodes.shared_memo.MEMO
    memo.clear()
    api = api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes)
    route = node_of(api, "SDVGRoute")
    api = wt.set_inputs(api, "SDVGRoute", tau=-5.0)
    ex = MiniExecutor(classes)
    ui = ex.run(api)
    n = SMALL["num_blocks"]
    # block 0 is forced: its draft/decode/score nodes never ran (lazy 'scored' input)
    assert ex.count("SDVGDraftBlock") == ex.count("SDVGDecodeBlock") == ex.count("SDVGScoreBlock") == n - 1
    assert ex.count("SDVGRoute") == n and ex.count("SDVGLoopStart") == n and ex.count("SDVGLoopEnd") == n
    save = ui[node_of(api, "SaveVideo")]["images"][0]
    assert save["frames"] == 1 + 4 * (3 * n - 1) and save["fps"] == 16.0
    rep = report_of(pack, ex, api)
    assert [b["decision"] for b in rep["blocks"]][0] == "forced"
    scores = [b["score"] for b in rep["blocks"]]
    assert scores[0] is None and all(s is not None and s >= -5 for s in scores[1:])
    assert all(b["decision"] == "accepted" for b in rep["blocks"][1:])
    plot = ex.values[node_of(api, "SDVGFinish")][2]
    assert plot.shape[0] == 1 and plot.shape[-1] == 3 and plot.shape[1] >= 200

    # re-queue with tau between the two lowest later scores: block k flips to rejected
    later = sorted(scores[1:])
    k = scores.index(later[0])
    tau2 = round((later[0] + later[1]) / 2, 6) if later[1] > later[0] else later[0] + 1e-4
    api2 = wt.set_inputs(api, "SDVGRoute", tau=tau2)
    ex.run(api2)
    ran = {c for _, c in ex.executed}
    assert not ran & {"SDVGLoadTarget", "SDVGLoadDrafter", "SDVGLoadImageReward", "VAELoader", "SDVGStart",
                      "SDVGLoadPromptEmbeddings"}, ran  # all cached by the executor
    assert route in [nid for nid, _ in ex.executed]  # the node holding tau re-ran
    rep2 = report_of(pack, ex, api2)
    assert rep2["blocks"][k]["decision"] == "rejected"
    for b in rep2["blocks"][:k]:
        assert b["work"]["drafter_forwards"] == 0 and b["work"]["target_forwards"] == 0, b
    assert rep2["blocks"][k]["work"]["drafter_forwards"] == 0 and rep2["blocks"][k]["work"]["target_forwards"] > 0
    if k + 1 < n:
        assert rep2["blocks"][k + 1]["work"]["drafter_forwards"] > 0
    frames2 = ex.values[node_of(api, "SDVGFinish")][0]

    # a fresh run at tau2 (empty memo, new executor) gives exactly the same video and decisions
    memo.clear()
    fresh = MiniExecutor(classes)
    fresh.run(api2)
    rep3 = report_of(pack, fresh, api2)
    assert [b["decision"] for b in rep3["blocks"]] == [b["decision"] for b in rep2["blocks"]]
    assert torch.equal(fresh.values[node_of(api, "SDVGFinish")][0], frames2)
    assert rep3["meta"]["lineage"] == rep2["meta"]["lineage"]

    # the same graph queued again: nothing runs
    fresh.run(api2)
    assert fresh.executed == []


# not slow although over a second: one workflow run through the nodes stays in the quick loop
def test_loop_with_a_route_that_scores_itself(env):
    """Route without the 'scored' chain: it drafts, decodes and scores itself (and never asks for the input)."""
    pack, classes = env
    api = api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes, tau=-5.0, seed=5)
    route = node_of(api, "SDVGRoute")
    del api[route]["inputs"]["scored"]
    for ct in ("SDVGDraftBlock", "SDVGDecodeBlock", "SDVGScoreBlock"):
        del api[node_of(api, ct)]
    ex = MiniExecutor(classes)
    ex.run(api)
    rep = report_of(pack, ex, api)
    assert [b["decision"] for b in rep["blocks"]] == ["forced"] + ["accepted"] * (SMALL["num_blocks"] - 1)
    assert all(b["work"]["scored_frames"] > 0 for b in rep["blocks"][1:])
    assert pack.nodes.SDVGRoute.check_lazy_status(state=ex.values[node_of(api, "SDVGLoopEnd")][0], tau=-0.7) == []


def test_route_checks_its_inputs(env):
    pack, classes = env
    n = pack.nodes
    target = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto").args[0]
    vae = pack.core_nodes.VAELoader.execute("wan_2.1_vae.safetensors").args[0]
    cond, prompt = n.SDVGLoadPromptEmbeddings.execute(EMB_FILE).args
    start = n.SDVGStart.execute(target, vae, cond, "", 64, 48, 2, 1, "krea", "standard", 1.0).args[0]
    assert start.state.spec.prompt.text == PROMPT  # carried by the embeddings file
    with pytest.raises(n.surface.SDVGError, match="no drafter"):
        n.SDVGDraftBlock.execute(start)
    s1 = n.SDVGRoute.execute(start, -0.7, True).args[0]  # block 0 forced: target only, no drafter needed
    assert s1.state.blocks[0].decision == "forced"
    assert n.SDVGRoute.check_lazy_status(state=start, tau=-0.7, force_reject_first=True, scored=None) == []
    assert n.SDVGRoute.check_lazy_status(state=s1, tau=-0.7, force_reject_first=True, scored=None) == ["scored"]
    assert n.SDVGRoute.check_lazy_status(state=s1, tau=-0.7, force_reject_first=True) == []  # not connected
    with pytest.raises(n.surface.SDVGError, match="no drafter"):
        n.SDVGRoute.execute(s1, -0.7, True)
    with pytest.raises(n.surface.SDVGError, match="not the draft of this block"):
        n.SDVGRoute.execute(s1, -0.7, True, scored=start)
    with pytest.raises(n.surface.SDVGError, match="multiple of 16"):
        n.SDVGStart.execute(target, vae, cond, "", 60, 48, 2, 1, "krea", "standard", 1.0)
