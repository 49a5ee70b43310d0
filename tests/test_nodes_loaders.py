"""The loader nodes against the fake host, on tiny models: the pt entry and model info, a ComfyUI MODEL input equal to
the pack's own file loader, the compile option (the loader's flag, and a MODEL through TorchCompileModel) and the
reports that say which model ran compiled, prompt embedding files, and the errors and /prompt validation that name
the file, its folder, the files there and where to get it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mini_executor import MiniExecutor
from node_env import EMB_FILE, REPO, api_for, fake_host_env, node_of, report_of

COMPILE_BACKEND = "eager"  # dynamo traces, nothing is code-generated: cheap enough for CI


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The fake host with a stand-in for ComfyUI's TorchCompileModel."""
    with fake_host_env(tmp_path_factory.mktemp("comfy")) as (pack, classes):
        classes["TorchCompileModel"] = torch_compile_model_stand_in()
        yield pack, classes


def torch_compile_model_stand_in():
    """ComfyUI's TorchCompileModel as SDVG sees it: a clone of the MODEL whose model_options carry the torch.compile
    arguments (`torch_compile_kwargs`, read by nodes/comfy_model.py); any backend name (the real node offers inductor
    and cudagraphs)."""
    from comfy_api.latest import io

    class TorchCompileModel(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="TorchCompileModel", category="_for_testing", inputs=[
                io.Model.Input("model"), io.String.Input("backend", default="inductor")], outputs=[io.Model.Output()])

        @classmethod
        def execute(cls, model, backend):
            clone = model.clone()
            clone.model_options["torch_compile_kwargs"] = {"backend": backend, "options": None, "mode": None}
            return io.NodeOutput(clone)

    return TorchCompileModel


def _model_target(api: dict, backend: str | None = None) -> dict:
    """The API prompt with the target loader fed by UNETLoader, through TorchCompileModel(backend) when given."""
    target = node_of(api, "SDVGLoadTarget")
    api["900"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "krea-realtime-video-14b.safetensors",
                                                         "weight_dtype": "default"}}
    api[target]["inputs"]["model"] = ["900", 0]
    if backend is not None:
        api["901"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["900", 0], "backend": backend}}
        api[target]["inputs"]["model"] = ["901", 0]
    return api


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


@pytest.mark.slow
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


def test_file_loader_compile_option_reaches_the_dit(env):
    """compile=True on SDVG Load Target / Drafter builds a CausalWan whose block regions are torch.compile'd."""
    pack, _ = env
    n = pack.nodes
    plain = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto", False).result[0]
    compiled = n.SDVGLoadTarget.execute("krea-realtime-video-14b.safetensors", "generator_ema", "auto", True).result[0]
    assert plain.dit.compile is False and compiled.dit.compile is True
    assert compiled.info.endswith(", compiled") and plain.key != compiled.key  # compiled numerics get their own memo entries


@pytest.mark.slow
def test_report_says_which_model_ran_compiled(env):
    """Plain run: 'compiled: no'. The same graph with the target's MODEL through TorchCompileModel: SDVG Generate's
    report says the target ran compiled with that backend (the drafter did not), recomputed rather than taken from
    the plain run's memo entries; SDVG Finish (step-by-step loop) says the same."""
    pack, classes = env
    pack.nodes.shared_memo.MEMO.clear()
    api = _model_target(api_for(REPO / "workflows" / "sdvg_generate.json", classes, tau=-5.0, num_blocks=2))
    ex = MiniExecutor(classes)  # one executor: both runs get the same UNETLoader MODEL (its cached output)
    ui = ex.run(api)
    plain = report_of(pack, ex, api, "SDVGGenerate")
    assert plain["compiled"] is False and plain["compiled_models"] == {}
    assert "compiled: no (eager DiTs)" in ui[node_of(api, "PreviewAny")]["text"][0]

    api = _model_target(api, COMPILE_BACKEND)
    ui = ex.run(api)
    rep = report_of(pack, ex, api, "SDVGGenerate")
    target = node_of(api, "SDVGLoadTarget")
    handle = ex.values[target][0]
    assert handle.dit.compile == COMPILE_BACKEND and ex.values[target][1].endswith(", compiled")
    assert rep["compiled"] is True and rep["compiled_models"] == {"target": COMPILE_BACKEND}
    # the same MODEL compiled keeps its derived data apart: nothing of the eager run's memo entries is reused
    assert rep["recomputed_target_forwards"] == rep["target_forwards"] > 0
    text = ui[node_of(api, "PreviewAny")]["text"][0]
    assert f"compiled: target ({COMPILE_BACKEND})" in text and "drafter (" not in text.split("compiled: ")[1]

    loop = _model_target(api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes, tau=-5.0,
                                    num_blocks=2), COMPILE_BACKEND)
    ex = MiniExecutor(classes)
    ex.run(loop)
    fin = report_of(pack, ex, loop, "SDVGFinish")
    assert fin["compiled_models"] == {"target": COMPILE_BACKEND} and fin["blocks"][1]["producer"] == "drafter"
    assert f"compiled: target ({COMPILE_BACKEND})" in ex.values[node_of(loop, "SDVGFinish")][1]


def test_prompt_embeddings_roundtrip(env):
    pack, _ = env
    n = pack.nodes
    emb = torch.randn(1, 520, 32)  # longer than Wan's 512: Start cuts it, the file keeps it
    path = n.SDVGSavePromptEmbeddings.execute([[emb, {"pooled_output": None}]], "a test prompt", "my test/prompt").args[0]
    assert Path(path).name == "my_test_prompt.safetensors"
    cond, prompt = n.SDVGLoadPromptEmbeddings.execute("my_test_prompt.safetensors").args
    assert prompt == "a test prompt" and torch.equal(cond[0][0], emb) and cond[0][1]["sdvg_prompt"] == prompt
    Path(path).unlink()


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
