"""Issue 33 items 4-5 in the node layer, against the fake host (tests/fake_comfy) on tiny models:

- SDVG Generate's StrideAR policies (`stride_kK`): the target makes blocks 0, K, 2K, ..., the drafter the rest,
  nothing scored (ImageReward need not be connected);
- the report of SDVG Generate and SDVG Finish says whether the run was compiled and which model: a ComfyUI MODEL
  through TorchCompileModel (a test stand-in with the cheap `eager` backend, so no inductor compile runs here)
  before a loader builds CausalWan(compile="eager"), and a compiled model keeps its derived data apart.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import fake_host
import test_nodes as tn
from mini_executor import MiniExecutor

REPO = Path(__file__).resolve().parents[1]
COMPILE_BACKEND = "eager"  # dynamo traces, nothing is code-generated: cheap enough for CI


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy_stride")
    with fake_host.installed(base) as pack:
        tn.write_tiny_models(base, pack.sdvg_core)
        classes = {c.GET_SCHEMA().node_id: c for c in list(pack.nodes.NODES) + list(pack.core_nodes.CORE_NODES)}
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
    target = tn.node_of(api, "SDVGLoadTarget")
    api["900"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "krea-realtime-video-14b.safetensors",
                                                         "weight_dtype": "default"}}
    api[target]["inputs"]["model"] = ["900", 0]
    if backend is not None:
        api["901"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["900", 0], "backend": backend}}
        api[target]["inputs"]["model"] = ["901", 0]
    return api


# ------------------------------------------------------------------------------------------------ StrideAR
def test_generate_stride_policy_routes_by_position_without_imagereward(env):
    pack, classes = env
    gen_cls = pack.nodes.generate
    assert [p for p in gen_cls.POLICIES if p.startswith("stride")] == ["stride:k=2", "stride:k=3", "stride:k=4"]
    schema = gen_cls.SDVGGenerate.GET_SCHEMA()
    tip = next(i for i in schema.inputs if i.id == "policy").tooltip
    assert "K-th block" in tip and "blocks 0, K, 2K" in tip  # the tooltip says what k means
    n = 5
    api = tn.api_for(REPO / "workflows" / "sdvg_generate.json", classes, policy="stride_k2", num_blocks=n)
    gen = tn.node_of(api, "SDVGGenerate")
    del api[gen]["inputs"]["image_reward"]  # a score-blind policy needs no scorer
    pack.nodes.shared_memo.MEMO.clear()
    ex = MiniExecutor(classes)
    ex.run(api)
    rep = tn.report_of(pack, ex, api, "SDVGGenerate")
    assert rep["policy"].startswith("stride k=2")
    assert [b["producer"] for b in rep["blocks"]] == ["target", "drafter", "target", "drafter", "target"]
    assert [b["decision"] for b in rep["blocks"]] == ["forced", "accepted", "forced", "accepted", "forced"]
    assert all(b["work"]["scored_frames"] == 0 and b["score"] is None for b in rep["blocks"])
    assert all(b["work"]["drafter_forwards"] == 0 for b in rep["blocks"] if b["producer"] == "target")
    assert rep["counted_speedup"] > 1.0 and rep["compiled"] is False


# ------------------------------------------------------------------------------------------------ compiled or not
def test_report_says_which_model_ran_compiled(env):
    """Plain run: 'compiled: no'. The same graph with the target's MODEL through TorchCompileModel: SDVG Generate's
    report says the target ran compiled with that backend (the drafter did not), recomputed rather than taken from
    the plain run's memo entries; SDVG Finish (step-by-step loop) says the same."""
    pack, classes = env
    pack.nodes.shared_memo.MEMO.clear()
    api = _model_target(tn.api_for(REPO / "workflows" / "sdvg_generate.json", classes, tau=-5.0, num_blocks=2))
    ex = MiniExecutor(classes)  # one executor: both runs get the same UNETLoader MODEL (its cached output)
    ui = ex.run(api)
    plain = tn.report_of(pack, ex, api, "SDVGGenerate")
    assert plain["compiled"] is False and plain["compiled_models"] == {}
    assert "compiled: no (eager DiTs)" in ui[tn.node_of(api, "PreviewAny")]["text"][0]

    api = _model_target(api, COMPILE_BACKEND)
    ui = ex.run(api)
    rep = tn.report_of(pack, ex, api, "SDVGGenerate")
    target = tn.node_of(api, "SDVGLoadTarget")
    handle = ex.values[target][0]
    assert handle.dit.compile == COMPILE_BACKEND and ex.values[target][1].endswith(", compiled")
    assert rep["compiled"] is True and rep["compiled_models"] == {"target": COMPILE_BACKEND}
    # the same MODEL compiled keeps its derived data apart: nothing of the eager run's memo entries is reused
    assert rep["recomputed_target_forwards"] == rep["target_forwards"] > 0
    text = ui[tn.node_of(api, "PreviewAny")]["text"][0]
    assert f"compiled: target ({COMPILE_BACKEND})" in text and "drafter (" not in text.split("compiled: ")[1]

    loop = _model_target(tn.api_for(REPO / "workflows" / "sdvg_loop_step_by_step.json", classes, tau=-5.0,
                                    num_blocks=2), COMPILE_BACKEND)
    ex = MiniExecutor(classes)
    ex.run(loop)
    fin = tn.report_of(pack, ex, loop, "SDVGFinish")
    assert fin["compiled_models"] == {"target": COMPILE_BACKEND} and fin["blocks"][1]["producer"] == "drafter"
    assert f"compiled: target ({COMPILE_BACKEND})" in ex.values[tn.node_of(loop, "SDVGFinish")][1]
