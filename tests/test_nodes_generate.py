"""SDVG Generate on tiny models against the fake host: the all-in-one workflow, the baseline comparison (target-only
and SDVG side by side, each a fresh run), the StrideAR policies (routed by position, no ImageReward), and the
long-video workflows (LongLive drafter, the video saved block by block, prompt changes)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mini_executor import MiniExecutor
from node_env import REPO, SMALL, api_for, env, node_of, report_of  # noqa: F401 (env: the fake host's fixture)


@pytest.mark.slow
def test_generate_and_baseline_workflows(env):
    pack, classes = env
    ex = MiniExecutor(classes)
    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, tau=-5.0)
    ui = ex.run(api)
    rep = report_of(pack, ex, api, "SDVGGenerate")
    assert len(rep["blocks"]) == SMALL["num_blocks"] and rep["blocks"][0]["decision"] == "forced"
    assert "counted speedup" in ui[node_of(api, "PreviewAny")]["text"][0]
    frames_sdvg = ex.values[node_of(api, "SDVGGenerate")][0]
    assert frames_sdvg.shape == (1 + 4 * (3 * SMALL["num_blocks"] - 1), 48, 64, 3)

    api = api_for(REPO / "workflows" / "sdvg_vs_target_only.json", classes, tau=-5.0)
    ex = MiniExecutor(classes)  # a new executor: the one above would serve the SDVG branch from its cache
    ex.run(api)
    gens = [k for k, v in api.items() if v["class_type"] == "SDVGGenerate"]
    reps = {api[g]["inputs"]["policy"]: report_of(pack, ex, api, nid=g) for g in gens}
    assert all(b["producer"] == "target" and b["decision"] == "forced" for b in reps["target-only"]["blocks"])
    assert reps["target-only"]["drafter_forwards"] == 0
    assert reps["sdvg"]["blocks"][0]["decision"] == "forced"
    assert reps["sdvg"]["counted_speedup"] > 1.0
    # SDVG at tau -5 equals the all-in-one graph above (same seed, same models)
    sdvg_node = next(g for g in gens if api[g]["inputs"]["policy"] == "sdvg")
    assert torch.equal(ex.values[sdvg_node][0], frames_sdvg)


@pytest.mark.slow
def test_baseline_times_are_fresh_runs(env):
    """sdvg_vs_target_only: neither Generate node takes blocks from the other's run (fresh_run on both), so both
    wall times are fresh runs; with fresh_run off the second node's report says its time is not a fresh run."""
    pack, classes = env
    pack.nodes.shared_memo.MEMO.clear()
    api = api_for(REPO / "workflows" / "sdvg_vs_target_only.json", classes, tau=-5.0)
    gens = [k for k, v in api.items() if v["class_type"] == "SDVGGenerate"]
    assert all(api[g]["inputs"]["fresh_run"] is True for g in gens)
    ex = MiniExecutor(classes)
    ex.run(api)
    for g in gens:
        rep = report_of(pack, ex, api, nid=g)
        assert rep["fresh_run"] and not any(b["reused"] for b in rep["blocks"]), (api[g]["inputs"]["policy"], rep["blocks"])
        assert rep["blocks"][0]["work"]["target_forwards"] > 0  # block 0 computed by each node itself
    shared = {g: {**n, "inputs": {**n["inputs"], "fresh_run": False}} if g in gens else n for g, n in api.items()}
    pack.nodes.shared_memo.MEMO.clear()
    ex = MiniExecutor(classes)
    ex.run(shared)
    reps = [report_of(pack, ex, shared, nid=g) for g in gens]
    assert sum(not r["fresh_run"] for r in reps) == 1  # the node that ran second took block 0 from the first
    second = next(r for r in reps if not r["fresh_run"])
    assert second["blocks"][0]["reused"] and second["blocks"][0]["work"]["target_forwards"] == 0
    table = ex.ui[next(g for g, r in zip(gens, reps) if not r["fresh_run"])]["text"][0]
    assert "NOT a fresh run's time" in table


@pytest.mark.slow
def test_generate_stride_policy_routes_by_position_without_imagereward(env):
    pack, classes = env
    gen_cls = pack.nodes.generate
    assert [p for p in gen_cls.POLICIES if p.startswith("stride")] == ["stride:k=2", "stride:k=3", "stride:k=4"]
    schema = gen_cls.SDVGGenerate.GET_SCHEMA()
    tip = next(i for i in schema.inputs if i.id == "policy").tooltip
    assert "K-th block" in tip and "blocks 0, K, 2K" in tip  # the tooltip says what k means
    n = 5
    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, policy="stride_k2", num_blocks=n)
    gen = node_of(api, "SDVGGenerate")
    del api[gen]["inputs"]["image_reward"]  # a score-blind policy needs no scorer
    pack.nodes.shared_memo.MEMO.clear()
    ex = MiniExecutor(classes)
    ex.run(api)
    rep = report_of(pack, ex, api, "SDVGGenerate")
    assert rep["policy"].startswith("stride k=2")
    assert [b["producer"] for b in rep["blocks"]] == ["target", "drafter", "target", "drafter", "target"]
    assert [b["decision"] for b in rep["blocks"]] == ["forced", "accepted", "forced", "accepted", "forced"]
    assert all(b["work"]["scored_frames"] == 0 and b["score"] is None for b in rep["blocks"])
    assert all(b["work"]["drafter_forwards"] == 0 for b in rep["blocks"] if b["producer"] == "target")
    assert rep["counted_speedup"] > 1.0 and rep["compiled"] is False


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sdvg_long_video", "sdvg_long_video_prompt_changes"])
def test_long_video_workflows(env, name):
    """The long-video templates at the test size: LongLive drafter (its kind's recipe) + Krea target, the video saved
    block by block into the output folder (shown on Generate), a preview as 'frames'; the prompt-changes one with
    its three prompts spread over the blocks, each block under its own."""
    import av
    import folder_paths

    pack, classes = env
    api = api_for(REPO / "workflows" / f"{name}.json", classes, tau=-5.0)
    nid = node_of(api, "SDVGGenerate")
    assert api[nid]["inputs"]["save_video"] is True and api[nid]["inputs"]["filename_prefix"].startswith("video/")
    ex = MiniExecutor(classes)
    ui = ex.run(api)
    rep = report_of(pack, ex, api, "SDVGGenerate")
    n = SMALL["num_blocks"]
    assert rep["recipe"] == "drafter longlive / target krea" and len(rep["blocks"]) == n
    assert "kind longlive" in rep["meta"]["drafter"] and "LoRA lora.pt merged" in rep["meta"]["drafter"]
    saved = ui[node_of(api, "SDVGShowVideo")]["images"][0]  # played on SDVG Show Video
    assert f"{saved['subfolder']}/{saved['filename']}" == ex.values[nid][4]
    path = Path(folder_paths.get_output_directory()) / saved["subfolder"] / saved["filename"]
    with av.open(str(path)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 1 + 4 * (3 * n - 1)
    assert ex.values[nid][0].shape[0] <= 32  # 'frames' is the preview
    if "prompt_changes" in name:
        assert len(rep["prompts"]) == 3 and [b["prompt"] for b in rep["blocks"]] == [0, 1, 2, 2]
        assert "prompt 1 from block 1" in ui[node_of(api, "PreviewAny")]["text"][0]
