"""The ComfyUI node layer against a fake host (tests/fake_comfy): schemas, workflows, execution on tiny models.

No ComfyUI here: `fake_host.installed` puts minimal fakes of the host modules into sys.modules for this module's
tests and imports the repo root as the package `sdvg_pack` (never as `nodes`, ComfyUI's own module name).
The example workflows are converted to the API format and run through the nodes by `mini_executor`, with the
text encoder swapped for SDVG Load Prompt Embeddings (as in tests/test_comfy_host.py).
"""
from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fake_host
import workflow_tools as wt
from mini_executor import MiniExecutor

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((REPO / "workflows").glob("*.json"))
PROMPT = "a corgi puppy runs through a sunny meadow, slow motion, cinematic"
EMB_FILE = "test_prompt.safetensors"
SMALL = {"width": 64, "height": 48, "num_blocks": 4}


def write_tiny_models(base: Path, core) -> None:
    """Tiny random models under the file names the workflows use (the real files are GBs)."""
    from safetensors.torch import save_file

    from_tiny = __import__(core.__name__ + ".demo.tiny", fromlist=["x"])
    wan = __import__(core.__name__ + ".models.wan", fromlist=["x"])
    cfgm = __import__(core.__name__ + ".models.wan_config", fromlist=["x"])
    reward = __import__(core.__name__ + ".io.reward_files", fromlist=["x"])
    reward_io = __import__(core.__name__ + ".demo.vocab", fromlist=["x"])
    text = __import__(core.__name__ + ".io.text", fromlist=["x"])
    m = base / "models"
    for d in ("diffusion_models", "vae", "image_reward", "sdvg_prompts", "text_encoders"):
        (m / d).mkdir(parents=True, exist_ok=True)
    drafter = {"model." + k: v for k, v in wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=1).state_dict().items()}
    ema = {"model." + k: v for k, v in wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=5).state_dict().items()}
    torch.save({"generator": drafter, "generator_ema": ema}, m / "diffusion_models" / "self_forcing_dmd.pt")
    target = wan.build_random(cfgm.PRESETS["tiny-target"], seed=2).state_dict()
    save_file({"model." + k: v.contiguous() for k, v in target.items()},
              str(m / "diffusion_models" / "krea-realtime-video-14b.safetensors"))
    save_file({k: v.contiguous() for k, v in from_tiny.random_vae(3).state_dict().items()},
              str(m / "vae" / "wan_2.1_vae.safetensors"))
    vocab = reward_io.write_synthetic_vocab(m / "image_reward" / "vocab.txt")
    scorer = reward.random_scorer(reward_io.synthetic_tiny_config(vocab), vocab, seed=4)
    torch.save(reward.export_state_dict(scorer.model), m / "image_reward" / "ImageReward.pt")
    text.save_embeddings(m / "sdvg_prompts" / EMB_FILE, PROMPT, text.demo_embeddings(PROMPT, 32))
    # LongLive-1.3B's layout: base weights under `generator`, a rank-256 peft LoRA on every Linear of the blocks
    lora_mod = __import__(core.__name__ + ".io.lora", fromlist=["x"])
    base = wan.build_random(cfgm.PRESETS["tiny-drafter"], seed=7)
    torch.save({"generator": {"model." + k: v for k, v in base.state_dict().items()}},
               m / "diffusion_models" / LONGLIVE_BASE)
    (m / "loras").mkdir(parents=True, exist_ok=True)
    torch.save({"generator_lora": peft_lora(base, lora_mod, LONGLIVE_RANK, seed=8)}, m / "loras" / LONGLIVE_LORA)


LONGLIVE_BASE, LONGLIVE_LORA, LONGLIVE_RANK = "longlive_base.pt", "lora.pt", 256


def peft_lora(net, lora_mod, rank: int, seed: int, scale: float = 0.05) -> dict:
    """A LoRA in peft's saved format (base_model.model.<module>.lora_A/B.weight) on every Linear of the blocks,
    small enough that the merged model stays a model (random tensors; no peft needed)."""
    gen = torch.Generator().manual_seed(seed)
    modules = dict(net.named_modules())
    out = {}
    for name in lora_mod.block_linear_names(net):
        lin = modules[name]
        out[f"{lora_mod.PEFT_PREFIX}{name}.lora_A.weight"] = torch.randn(rank, lin.in_features, generator=gen) * scale
        out[f"{lora_mod.PEFT_PREFIX}{name}.lora_B.weight"] = torch.randn(lin.out_features, rank, generator=gen) * scale
    return out


def loaded_models(pack) -> dict:
    """The loaded tiny models by SDVG Start's input names: target, Self-Forcing drafter, ImageReward, VAE, the test
    prompt's conditioning."""
    n = pack.nodes
    return {"target": n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto").args[0],
            "drafter": n.SDVGLoadDrafter.execute("self_forcing_dmd.pt").args[0],
            "image_reward": n.SDVGLoadImageReward.execute("ImageReward.pt", "auto", 16).args[0],
            "vae": pack.core_nodes.VAELoader.execute("wan_2.1_vae.safetensors").args[0],
            "positive": n.SDVGLoadPromptEmbeddings.execute(EMB_FILE).args[0]}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy")
    with fake_host.installed(base) as pack:
        write_tiny_models(base, pack.sdvg_core)
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
        yield pack, classes


def api_for(wf_path: Path, classes: dict, tau: float | None = None, **widgets) -> dict:
    """API prompt of a workflow at the test size; tau goes to SDVG Route / SDVG Generate."""
    specs = wt.object_info_from_classes(classes.values())
    blocks = widgets.get("num_blocks", SMALL["num_blocks"])
    api = wt.swap_schedule_encoder(wt.swap_text_encoder(wt.to_api(wt.load(wf_path), specs), EMB_FILE), EMB_FILE, blocks)
    start = {k: v for k, v in {**SMALL, **widgets}.items() if k not in ("policy", "force_reject_first")}
    api = wt.set_inputs(api, "SDVGStart", **start)
    api = wt.set_inputs(api, "SDVGGenerate", **{**SMALL, **widgets, **({} if tau is None else {"tau": tau})})
    return api if tau is None else wt.set_inputs(api, "SDVGRoute", tau=tau)


def node_of(api: dict, class_type: str) -> str:
    return next(k for k, v in api.items() if v["class_type"] == class_type)


def report_of(pack, ex: MiniExecutor, api: dict, class_type: str = "SDVGFinish", nid: str | None = None) -> dict:
    import json

    nid = nid or node_of(api, class_type)
    return json.loads(ex.values[nid][3])


# ------------------------------------------------------------------------------------------------ schemas
def test_schemas_ids_categories_tooltips(env):
    pack, _ = env
    ids = set()
    for cls in pack.nodes.NODES:
        s = cls.GET_SCHEMA()
        assert s.node_id.startswith("SDVG") and s.node_id not in ids, s.node_id
        ids.add(s.node_id)
        assert s.category == "SDVG" or s.category.startswith("SDVG/"), (s.node_id, s.category)
        assert s.display_name and s.display_name.startswith("SDVG") and s.description, s.node_id
        for i in s.inputs:
            assert i.tooltip and len(i.tooltip) > 10, (s.node_id, i.id)
            if i.lazy:
                assert i.optional, (s.node_id, i.id)
        for o in s.outputs:
            assert o.tooltip and o.display_name, (s.node_id, o.display_name)
        assert cls.__doc__, s.node_id
    assert pack.nodes.SDVGLoopEnd.GET_SCHEMA().enable_expand
    ext = asyncio.run(pack.comfy_entrypoint())
    assert asyncio.run(ext.get_node_list()) == list(pack.nodes.NODES)
    assert len(ids) == 21


def test_root_imports_without_comfyui():
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('pack', sys.argv[1], "
            "submodule_search_locations=[sys.argv[2]]); m = importlib.util.module_from_spec(s); sys.modules['pack'] = m; "
            "s.loader.exec_module(m); print(hasattr(m, 'comfy_entrypoint'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "__init__.py"), str(REPO)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_root_imports_as_a_package_where_comfy_api_is_installed_but_comfyui_is_not_running(tmp_path):
    """The pip-installable build puts `comfy_api` in its venv: pytest 9, run with that python, imports the checkout's
    root __init__.py as a package (named after its folder) when it sets up a test. Without a running ComfyUI (no
    `folder_paths`) it defines no nodes and raises nothing; with ComfyUI's modules it registers the nodes (the fake
    host's tests)."""
    (tmp_path / "comfy_api").mkdir()
    (tmp_path / "comfy_api" / "__init__.py").write_text("")  # installed, as in the pip build's venv
    code = ("import importlib.util, sys; sys.path.insert(0, sys.argv[3]); "
            "s = importlib.util.spec_from_file_location('checkout', sys.argv[1], submodule_search_locations=[sys.argv[2]]); "
            "m = importlib.util.module_from_spec(s); sys.modules['checkout'] = m; s.loader.exec_module(m); "
            "print(hasattr(m, 'comfy_entrypoint'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "__init__.py"), str(REPO), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_folders_registered(env):
    pack, _ = env
    import folder_paths

    assert "image_reward" in folder_paths.folder_names_and_paths
    assert {".pt", ".safetensors"} <= folder_paths.folder_names_and_paths["image_reward"][1]
    assert folder_paths.get_filename_list("image_reward") == ["ImageReward.pt"]  # vocab.txt is not a weights file
    assert folder_paths.get_filename_list("sdvg_prompts") == [EMB_FILE]


# ------------------------------------------------------------------------------------------------ workflows
def test_workflows_valid(env):
    pack, classes = env
    specs = wt.object_info_from_classes(classes.values())
    # saved in the oldest supported host's shape (strict: every widget has its value), and loadable on the newest
    saved = wt.object_info_from_classes(list(pack.nodes.NODES) + pack.core_nodes.saved_shape())
    oldest = {c.GET_SCHEMA().node_id for c in pack.core_nodes.core_nodes(pack.core_nodes.WORKFLOW_HOST)}
    assert len(WORKFLOWS) >= 3
    for path in WORKFLOWS:
        wf = wt.load(path)
        assert wt.validate(wf, saved) == [], path.name
        assert wt.validate(wf, specs, host_newer=True) == [], path.name
        types = {n["type"] for n in wf["nodes"]}
        assert types <= set(specs) | wt.FRONTEND_ONLY, path.name
        # a core node the oldest supported host lacks is named with the version the workflow needs (hosts before it
        # skip the workflow with that reason)
        version, named = wt.workflow_needs(wf)
        newer = sorted(t for t in types if t in saved and not t.startswith("SDVG") and t not in oldest)
        assert newer == sorted(named) and (version > pack.core_nodes.WORKFLOW_HOST) == bool(newer), (path.name, newer)
        assert any(t.startswith("SDVG") for t in types)
        listed = {m["name"] for n in wf["nodes"] for m in n.get("properties", {}).get("models", [])}
        assert {"krea-realtime-video-14b.safetensors", "wan_2.1_vae.safetensors"} <= listed, path.name
        assert all(name.endswith(".safetensors") for name in listed), path.name  # the frontend downloads only those
        notes = " ".join(str(v) for n in wf["nodes"] if n["type"] == "MarkdownNote" for v in n["widgets_values"])
        assert "ImageReward.pt" in notes and "vocab.txt" in notes, path.name
        # every file a loader reads that the frontend cannot offer for download (.pt) is named in the notes
        pt = {v for n in wf["nodes"] if n["type"].startswith("SDVGLoad") for v in n["widgets_values"]
              if isinstance(v, str) and v.endswith(".pt")}
        assert pt and all(f in notes for f in pt), (path.name, pt)
        api = wt.to_api(wf, specs)
        for nid, node in api.items():  # every link points at an existing node's existing output
            for v in node["inputs"].values():
                if isinstance(v, list):
                    assert v[0] in api and v[1] < len(specs[api[v[0]]["class_type"]]["output"]), (path.name, nid)


def test_workflow_files_match_builder():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "build_workflows.py"), "--check"], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


# ------------------------------------------------------------------------------------------------ execution
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


def test_model_input_path_equals_file_path(env):
    """A ComfyUI MODEL (UNETLoader) wraps the same network: identical video to the pack's own file loader."""
    pack, classes = env
    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, policy="target_only", num_blocks=2)
    ex = MiniExecutor(classes)
    ex.run(api)
    by_file = ex.values[node_of(api, "SDVGGenerate")][0]
    target = node_of(api, "SDVGLoadTarget")
    api["900"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "krea-realtime-video-14b.safetensors",
                                                         "weight_dtype": "default"}}
    api[target]["inputs"]["model"] = ["900", 0]
    ex.run(api)
    by_model = ex.values[node_of(api, "SDVGGenerate")][0]
    assert torch.equal(by_file, by_model)
    info = ex.values[target][1]
    assert "ComfyUI MODEL" in info and "FakeWanModel" in info


def test_pt_entry_and_info(env):
    pack, _ = env
    n = pack.nodes
    ema = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", pt_entry="auto")  # the kind's entry: generator_ema
    gen = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", pt_entry="generator")
    assert "entry 'generator_ema'" in ema.args[1] and "entry 'generator'" in gen.args[1]
    assert ema.args[0].key != gen.args[0].key
    w_ema = ema.args[0].dit.net.blocks[0].self_attn.q.weight
    assert not torch.equal(w_ema, gen.args[0].dit.net.blocks[0].self_attn.q.weight)
    again = n.SDVGLoadDrafter.execute("self_forcing_dmd.pt", pt_entry="generator_ema")
    assert again.args[0].key == ema.args[0].key  # stable identity across re-execution: the memo keeps working


def test_one_model_loaded_per_operation_and_progress(env):
    pack, classes = env
    import comfy.model_management as mm
    import comfy.utils

    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, tau=-5.0, seed=7)
    mm.LOAD_CALLS.clear()
    comfy.utils.PROGRESS.clear()
    pack.nodes.shared_memo.MEMO.clear()
    MiniExecutor(classes).run(api)
    memo = pack.nodes.comfy_memory.memo_patcher()
    # never two models forced at once: each call loads one model, together with the memo its call reads
    assert mm.LOAD_CALLS and all(len(c) == 2 and c[1] is memo for c in mm.LOAD_CALLS)
    holders = {type(p.model.inner).__name__ if hasattr(p.model, "inner") else type(p.model).__name__
               for c in mm.LOAD_CALLS for p in c[:1]}
    assert holders >= {"WanDiT", "WanVAE", "ImageRewardModel"}
    previews = [p for p in comfy.utils.PROGRESS if p[2]]
    assert len(previews) == SMALL["num_blocks"]
    assert comfy.utils.PROGRESS[-1][0] == comfy.utils.PROGRESS[-1][1]


def test_cancel_between_steps(env):
    pack, classes = env
    import comfy.model_management as mm

    api = api_for(REPO / "workflows" / "sdvg_generate.json", classes, seed=11)
    pack.nodes.shared_memo.MEMO.clear()
    mm.interrupt_current_processing(True)
    with pytest.raises(mm.InterruptProcessingException):
        MiniExecutor(classes).run(api)
    assert not mm.processing_interrupted()


def test_file_loader_compile_option_reaches_the_dit(env):
    """compile=True on SDVG Load Target / Drafter builds a CausalWan whose block regions are torch.compile'd."""
    pack, _ = env
    n = pack.nodes
    plain = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto", False).result[0]
    compiled = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto", True).result[0]
    assert plain.dit.compile is False and compiled.dit.compile is True
    assert compiled.info.endswith(", compiled") and plain.key != compiled.key  # compiled numerics get their own memo entries


# ------------------------------------------------------------------------------------------------ errors
def test_errors_name_file_folder_and_source(env):
    pack, _ = env
    n = pack.nodes
    with pytest.raises(n.surface.SDVGError) as e:
        n.SDVGLoadTarget.execute("missing-14b.safetensors", "generator_ema", "auto")
    msg = str(e.value)
    assert "missing-14b.safetensors" in msg and "models/diffusion_models" in msg and "krea/krea-realtime-video" in msg
    assert "self_forcing_dmd.pt" in msg  # the files that are there
    with pytest.raises(n.surface.SDVGError) as e:
        n.SDVGLoadImageReward.execute("nope.pt", "auto", 16)
    assert "THUDM/ImageReward" in str(e.value) and "models/image_reward" in str(e.value)
    # a vocabulary missing next to the weights: the error lists where it looked and where to get it
    import folder_paths

    folder = Path(folder_paths.get_folder_paths("image_reward")[0])
    vocab = folder / "vocab.txt"
    vocab.rename(folder / "vocab.bak")
    try:
        with pytest.raises(n.surface.SDVGError) as e:
            n.SDVGLoadImageReward.execute("ImageReward.pt", "auto", 16)
        assert "vocab.txt" in str(e.value) and "bert-base-uncased" in str(e.value)
    finally:
        (folder / "vocab.bak").rename(vocab)
    with pytest.raises(n.surface.SDVGError, match="not a Wan 2.1"):
        n.comfy_model.host_comfy_model(type("M", (), {"model": type("B", (), {"diffusion_model": torch.nn.Linear(2, 2)})()})(),
                                "target")


def test_loaders_validate_their_files(env):
    """validate_inputs (run at /prompt by ComfyUI): True for a file that is there, else the pack's message naming the
    folder, the files there and the source (newer ComfyUI would otherwise answer only 'Value not in list')."""
    pack, _ = env
    n = pack.nodes
    assert n.SDVGLoadTarget.validate_inputs("krea-realtime-video-14b.safetensors") is True
    assert n.SDVGLoadDrafter.validate_inputs("self_forcing_dmd.pt") is True
    assert n.SDVGLoadImageReward.validate_inputs("ImageReward.pt") is True
    assert n.SDVGLoadPromptEmbeddings.validate_inputs(EMB_FILE) is True
    msg = n.SDVGLoadTarget.validate_inputs("missing-14b.safetensors")
    assert "missing-14b.safetensors" in msg and "models/diffusion_models" in msg and "krea/krea-realtime-video" in msg
    assert n.SDVGLoadTarget.validate_inputs("missing-14b.safetensors", input_types={"model": "MODEL"}) is True
    msg = n.SDVGLoadImageReward.validate_inputs("nope.pt")
    assert "nope.pt" in msg and "models/image_reward" in msg and "THUDM/ImageReward" in msg
    msg = n.SDVGLoadPromptEmbeddings.validate_inputs("gone.safetensors")
    assert isinstance(msg, str) and "gone.safetensors" in msg and "models/sdvg_prompts" in msg
    assert "SDVG Save Prompt Embeddings" in msg and EMB_FILE in msg  # where files come from; the ones that are there
    assert isinstance(n.SDVGLoadPromptEmbeddings.validate_inputs(""), str)


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


def test_prompt_embeddings_roundtrip(env):
    pack, _ = env
    n = pack.nodes
    emb = torch.randn(1, 520, 32)  # longer than Wan's 512: Start cuts it, the file keeps it
    path = n.SDVGSavePromptEmbeddings.execute([[emb, {"pooled_output": None}]], "a test prompt", "my test/prompt").args[0]
    assert Path(path).name == "my_test_prompt.safetensors"
    cond, prompt = n.SDVGLoadPromptEmbeddings.execute("my_test_prompt.safetensors").args
    assert prompt == "a test prompt" and torch.equal(cond[0][0], emb) and cond[0][1]["sdvg_prompt"] == prompt
    Path(path).unlink()


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


# ------------------------------------------------------------------------------------------------ what the report says
def test_every_workflow_shows_the_report_on_screen():
    """Node 'ui text' is not drawn by the frontend: every Finish/Generate report must feed a text-display node."""
    for path in WORKFLOWS:
        wf = wt.load(path)
        nodes = {n["id"]: n for n in wf["nodes"]}
        sources = [n for n in wf["nodes"] if n["type"] in ("SDVGFinish", "SDVGGenerate", "SDVGARReport", "SDVGLive")]
        assert sources, path.name
        for src in sources:
            slot = next(i for i, o in enumerate(src["outputs"]) if o["name"] == "report")
            shown = [nodes[l[3]]["type"] for l in wf["links"] if l[1] == src["id"] and l[2] == slot]
            assert "PreviewAny" in shown, (path.name, src["id"], shown)


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


# ------------------------------------------------------------------------------------------------ a guest of ComfyUI's memory
def test_importing_the_pack_replaces_nothing_of_the_host(env):
    """Every attribute of ComfyUI's memory manager, ModelPatcher module, utils and folder registry is the very same
    object after the pack's import (and after it ran workflows): the pack registers its memo, it patches nothing."""
    pack, _ = env
    for name, before in pack.host_before_import.items():
        now = vars(sys.modules[name])
        changed = sorted(k for k in before if now.get(k) is not before[k] and k != "__loader__")
        if name == "folder_paths":  # the pack adds its folders to the registry's dict (data, the same dict object)
            changed = [k for k in changed if callable(before[k])]
        assert changed == [], (name, changed)
        assert not any(callable(now[k]) and not k.startswith("__") for k in set(now) - set(before)), name


def _memo_env(pack):
    import comfy.model_management as mm

    memo, cm = pack.nodes.shared_memo.MEMO, pack.nodes.comfy_memory
    memo.clear()
    mm.current_loaded_models.clear()
    return mm, memo, cm


def test_comfyui_frees_the_memo_by_its_own_logic(env):
    """Registered at SDVG's first model call; another model's load that needs part of the memory makes ComfyUI ask
    the memo to `partially_unload` (its least-recently-used entries go, the rest and the registration stay); one
    that needs everything `detach`es it (every entry goes); Unload Models does the same through unload_all_models."""
    pack, _ = env
    mm, memo, cm = _memo_env(pack)
    entry = 80 * 2**20  # bytes: big entries (the small tier takes <= 64 MB)
    for i in range(3):
        memo.put(("kv", i), torch.zeros(entry // 4))
    assert not cm.registered()  # nothing until an SDVG model call
    own = cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu"))
    cm.load(own)
    assert cm.registered() and cm.memo_patcher().loaded_size() == 3 * entry
    other = cm.managed(torch.nn.Linear(4, 4), torch.device("cpu"), torch.device("cpu"))  # another pack's model
    old = mm.FAKE_FREE_BYTES
    try:
        mm.FAKE_FREE_BYTES = 1 << 30
        mm.load_models_gpu([other], memory_required=(1 << 30) + entry // 2)  # half an entry missing: the oldest goes
        assert ("kv", 0) not in memo and ("kv", 1) in memo and ("kv", 2) in memo and cm.registered()
        cm.load(own)  # SDVG's own swap while the device is full: its caches stay
        mm.FAKE_FREE_BYTES = 0
        cm.load(own)
        assert memo.large.bytes == 2 * entry
        mm.load_models_gpu([other], memory_required=1 << 40)  # needs more than the memo holds: all of it goes
        assert memo.bytes == 0 and not cm.registered()
    finally:
        mm.FAKE_FREE_BYTES = old
    memo.pin("decoder_head", ("decoder", 0), torch.zeros(entry // 4))
    memo.put(("block", 0), torch.zeros(1 << 18))
    cm.load(own)
    mm.unload_all_models()  # the Unload Models button, /free
    assert memo.bytes == 0 and memo.pinned_bytes == 0 and not cm.registered()
    mm.current_loaded_models.clear()


def test_memo_patcher_takes_any_arguments_the_host_passes(env):
    """The pip build's partially_unload has `force_patch_weights`, upstream's not; detach(unpatch_all=False) is
    ComfyUI re-registering a model it is about to load again (nothing must be dropped then)."""
    pack, _ = env
    mm, memo, cm = _memo_env(pack)
    memo.put(("kv", 0), torch.zeros(20 * 2**20))
    p = cm.memo_patcher()
    assert p.partially_unload(torch.device("cpu"), 1, force_patch_weights=True) > 0 and memo.bytes == 0
    memo.put(("kv", 1), torch.zeros(20 * 2**20))
    p.detach(unpatch_all=False)
    assert memo.bytes > 0
    with cm.own_load():  # inside SDVG's own load nothing is dropped, whatever ComfyUI asks
        p.detach(True)
        assert p.partially_unload(torch.device("cpu"), 1) == 0
    assert memo.bytes > 0
    p.detach(True)
    assert memo.bytes == 0
    assert p.partially_load(torch.device("cpu"), 1e32, force_patch_weights=False) == 0


def test_a_generation_releases_what_it_held(env):
    """What a generation holds outside the memo's budget (decoder cache head, newest pixels, text K/V) is released when
    it ends: after SDVG Generate, and after SDVG Finish in the step-by-step loop."""
    pack, classes = env
    memo = pack.nodes.shared_memo.MEMO
    for wf in ("sdvg_generate.json", "sdvg_loop_step_by_step.json"):
        memo.clear()
        api = api_for(REPO / "workflows" / wf, classes, tau=-5.0, seed=3, num_blocks=2)
        MiniExecutor(classes).run(api)
        assert memo.pinned_bytes == 0, wf
        assert memo.bytes > 0, wf  # the budgeted entries stay for a re-queue


def _storages(value, out: dict) -> dict:
    """{storage pointer: bytes} of the tensors inside a value (tensors, tuples/lists, dataclasses)."""
    import dataclasses

    if isinstance(value, torch.Tensor):
        out[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    elif isinstance(value, (tuple, list)):
        for v in value:
            _storages(v, out)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _storages(getattr(value, f.name), out)
    return out


def test_state_outputs_show_the_host_the_tensors_only_they_hold(env):
    """ComfyUI 0.33's RAM-pressure output cache sizes an output by the tensors in its lists/tuples (the real cache:
    test_comfy_host). After the step-by-step loop, every SDVG_STATE output shows it, beside its GenerationState,
    exactly its draft's decoded frames; whatever else its state holds outside the shared memo is the prompt's
    embeddings, which SDVG Start's state already held (shared by every state, not one output's)."""
    pack, classes = env
    from sdvg_pack.nodes.session import Run

    memo = pack.nodes.shared_memo.MEMO
    memo.clear()
    api = api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes, tau=-5.0, seed=9)
    ex = MiniExecutor(classes)
    ex.run(api)
    runs = {nid: v for nid, vals in ex.values.items() for v in (vals or ()) if isinstance(v, Run)}
    in_memo: dict = {}
    for tier in (memo.small, memo.large):
        for value, _ in tier._data.values():
            _storages(value, in_memo)
    prompt = _storages(runs[node_of(api, "SDVGStart")].state, {})
    drafts = 0
    for nid, run in runs.items():
        pending = run.state.pending
        frames = pending.frames if pending is not None else None
        assert run[0] is run.state and list(run[1:]) == ([] if frames is None else [frames]), nid
        drafts += frames is not None
        shown = _storages(tuple(run[1:]), {})
        outside = set(_storages(run.state, {})) - set(in_memo) - set(shown)
        assert outside <= set(prompt), (nid, outside)
    assert drafts == 2 * (SMALL["num_blocks"] - 1)  # Decode and Score of every drafted block


def test_a_corrupt_checkpoint_message_reads_as_sentences(env, tmp_path):
    """The loader adds its advice after the checkpoint reader's sentence: one period between them, never two."""
    pack, _ = env
    import folder_paths

    folder = Path(folder_paths.get_folder_paths("diffusion_models")[0])
    bad = folder / "broken-14b.safetensors"
    bad.write_bytes(b"\x00" * 1024)
    try:
        with pytest.raises(pack.nodes.surface.SDVGError) as e:
            pack.nodes.SDVGLoadTarget.execute("broken-14b.safetensors", "generator_ema", "auto")
    finally:
        bad.unlink()
    msg = str(e.value)
    assert "Download it again" in msg and ".." not in msg and "Expected a Wan 2.1" in msg, msg


def test_every_report_is_readable_at_the_saved_view():
    """A workflow opens at its saved view (extra.ds): there, in the reference window (1920x1080, frontend 1.5x's bars
    over the canvas' edges), every report viewer and every SDVG node lies inside the visible canvas area, at a zoom
    where the frontend draws text (tests/frontend_probe.py checks the same in the real frontend)."""
    left, top, w, h = wt.visible_area()
    for path in WORKFLOWS:
        wf = wt.load(path)
        assert wf["extra"]["ds"]["scale"] >= wt.MIN_READABLE_SCALE, (path.name, wf["extra"]["ds"])
        shown = [n for n in wf["nodes"] if n["type"] == "PreviewAny" or n["type"].startswith("SDVG")]
        assert any(n["type"] == "PreviewAny" for n in shown), path.name
        for n in shown:
            x0, y0, x1, y1 = wt.screen_rect(wf, n)
            assert left <= x0 and x1 <= left + w and top <= y0 and y1 <= top + h, (path.name, n["type"], n.get("title"),
                                                                                  (x0, y0, x1, y1))


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


def test_policy_widgets_speak_the_cores_grammar_and_read_older_workflows(env):
    """SDVG Generate's and the AR sampler's policy options are names of the core's grammar; a value an older workflow
    saved (stride_k2, target_only, draft_only) passes the node's own validation, which the host runs instead of its
    combo check, and runs as the policy it meant; a name the grammar does not know is refused there."""
    pack, _ = env
    core = pack.sdvg_core
    from importlib import import_module

    names = import_module(core.__name__ + ".engine.policy_names")
    gen, ar = pack.nodes.SDVGGenerate, pack.nodes.SDVGSamplerARVideo
    for cls in (gen, ar):
        options = next(i for i in cls.GET_SCHEMA().inputs if i.id == "policy").widget["options"]
        assert all(names.parse_policy(o).name in (o, "sdvg:tau=-0.7") for o in options), options
    assert gen.validate_inputs(policy="stride_k2") is True and gen.validate_inputs(policy="target_only") is True
    assert ar.validate_inputs(policy="draft_only", input_types={"drafter": "MODEL"}) is True
    assert "unknown policy" in gen.validate_inputs(policy="stride_k9")
    assert "must be one of" in ar.validate_inputs(policy="stride:k=2")  # a policy the sampler does not offer
    run = import_module(pack.__name__ + ".nodes.session")
    assert run.node_policy("x", "stride_k3", -0.7, True) == names.policy_by_name("stride:k=3")
    assert run.node_policy("x", "sdvg", -1.25, False) == names.policy_by_name("sdvg:tau=-1.25", force_reject_first=False)
