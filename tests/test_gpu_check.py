"""`./dev.sh gpu-check`: the dry run proves the GPU plan on a CPU (meta models at full size, shapes, FLOPs, the
memory and time estimates for an H200 and an H100), refuses what does not fit, and the real run's code writes its
files (run here at the tiny size on the CPU)."""
from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the GPU check's phases, run on the CPU

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

gc_ = importlib.import_module("gpu_check")
bs = importlib.import_module("bench_scale")
units = importlib.import_module("units")


def _plan(gpu="h100", **kw):
    base = dict(gpu=gc_.GPUS[gpu], rounds=3, configs=bs.select_configs(gc_.DEFAULT_CONFIGS), blocks=bs.BLOCKS,
                drafter_recipe="krea", target_recipe="krea", memo_bytes=bs.DEFAULT_MEMO_BYTES, peer=True)
    base.update(kw)
    return gc_.Plan(**base)


@pytest.fixture(scope="module")
def measured():
    """The CPU part of the dry run at full size, once for every test here (GPU-independent)."""
    return gc_.measure_plan(_plan(), log=lambda *_: None)


def test_dry_run_checks_every_call_at_full_size(measured):
    m = measured
    # the real architectures were built (on meta): 1.3B and 14B parameters
    assert 1.3e9 < m.params["drafter"] < 1.5e9 and 14.0e9 < m.params["target"] < 14.5e9
    labels = {c["call"] for c in m.checks}
    for want in ("target denoise 3f+3", "drafter denoise 3f+3", "target context 3f+0", "drafter context 3f+0",
                 "target text", "decode_first", "decode", "encode", "score_frame",
                 "target denoise 3f+24",  # the Self-Forcing row of the memory table: its whole-video window
                 "route_decode_first", "route_decode"):  # the tiny routing decoder (TAEHV at taew2_1's widths)
        assert want in labels
    assert all(c["ok"] for c in m.checks), [c for c in m.checks if not c["ok"]]
    flops = {c.label: v.flops for c, v in m.flops.items()}
    # the 14B : 1.3B forward ratio at 832x480 is the design's 1:7.4; a context forward skips the last layer's work
    assert flops["target denoise 3f+3"] / flops["drafter denoise 3f+3"] == pytest.approx(7.4, abs=0.05)
    assert flops["target context 3f+0"] < flops["target denoise 3f+0"]
    # full depth and the 1-/2-layer extrapolation agree where both ran
    assert any(c["note"] == "full depth" for c in m.checks)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_dry_run_plan_fits_gpu_and_budget(measured, gpu):
    e = gc_.price_plan(_plan(gpu), measured)
    assert e["shapes_ok"] and e["fits_memory"] and e["fits_budget"] and e["ok"]
    assert e["estimated_total_s"] <= gc_.BUDGET_S
    assert e["memory"]["estimated_peak_bytes"] <= e["memory"]["limit_bytes"]
    assert set(e["estimated_phase_s"]) == {"build", "warm-up", "benchmark rounds", "memory table", "traffic",
                                          "peer probe"}
    assert 0 < e["optional_phase_s"]["cuda graph"] < gc_.GRAPH_MIN_S  # in the time left, when enough is left
    assert 0 < e["optional_phase_s"]["route overhead"] < gc_.ROUTE_MIN_S
    assert "sdvg-taehv" not in e["plan"]["configs"]  # the budget has no room for a sixth of the rounds more
    # at full size the tiny decoder's block costs a small part of the VAE's (FLOPs per decoded latent frame)
    flops = {c.label: v.flops for c, v in measured.flops.items()}
    assert flops["route_decode"] < flops["decode"] / 10
    assert e["plan"]["width"] == 832 and e["plan"]["height"] == 480 and e["plan"]["rounds"] == 3
    # the configurations' estimated times are ordered as their work is
    t = e["estimated_config_s"]
    assert t["all-accept"] < t["sdvg"] < t["reference"] < t["target-only"] < t["all-reject"]
    md = gc_.dry_run_markdown(e)
    assert "estimates, not measurements" in md and "fits" in md


def test_dry_run_refuses_a_peak_over_the_gpu_and_a_time_over_the_budget(measured, monkeypatch, tmp_path, capsys):
    big_memo = _plan("h100", memo_bytes=50 * 2**30)  # weights ~30 GiB + a 50 GiB memo > 76 GiB usable
    assert not gc_.price_plan(big_memo, measured)["fits_memory"]
    assert gc_.price_plan(_plan("h200", memo_bytes=50 * 2**30), measured)["fits_memory"]
    assert not gc_.price_plan(_plan("h200", rounds=12), measured)["fits_budget"]
    # the command's exit status (measure_plan reused: the plan's counts do not depend on the memo)
    monkeypatch.setattr(gc_, "measure_plan", lambda plan, log=print: measured)
    assert gc_.main(["--dry-run", "--gpu", "h100", "--memo-gb", "50", "--out", str(tmp_path)]) == 1
    assert "does not fit" in capsys.readouterr().out
    assert gc_.main(["--dry-run", "--gpu", "h100", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "dry-run.json").read_text())
    assert data["ok"] and (tmp_path / "dry-run.md").exists()


def test_stubbed_counts_equal_real_counts():
    """The dry run counts calls with the VAE and scorer replaced by stand-ins: the counts are those of a real run."""
    configs = [bs.CONFIGS["sdvg"], bs.CONFIGS["reference"]]
    stubbed, _ = gc_.count_calls(configs, 4, "krea", "krea", bs.DEFAULT_MEMO_BYTES)
    a = bs.parse_args(["--size", "tiny", "--blocks", "4"])
    with tempfile.TemporaryDirectory() as tmp:
        setup, _ = bs.make_setup(a, Path(tmp))
    real = {c.id: bs.run_units(bs.run_config(setup, c)) for c in configs}
    assert real == stubbed
    assert sum(n for c, n in stubbed["sdvg"].items() if c.kind == "decode_first") == 1


def test_real_run_writes_its_files_on_a_cpu(tmp_path):
    """The real run's code end to end (tiny models on the CPU: benchmark, memory table, summary)."""
    out = tmp_path / "check"
    assert gc_.main(["--size", "tiny", "--device", "cpu", "--rounds", "1", "--blocks", "3", "--out", str(out)]) == 0
    for name in ("bench.json", "bench.md", "memory.json", "memory.md", "traffic.json", "traffic.md", "cuda-graph.json",
                 "gpu-check.json", "gpu-check.md"):
        assert (out / name).exists(), name
    doc = json.loads((out / "gpu-check.json").read_text())
    assert [r["id"] for r in doc["bench"]["rows"]] == gc_.DEFAULT_CONFIGS.split(",")
    # the routing-cost phase (UNVERIFIED until a GPU runs it): each decoder's block decode and scoring
    route = json.loads((out / "route-overhead.json").read_text())
    assert "UNVERIFIED" in route["label"] and set(route["decoders"]) == {"wan_vae", "taehv:tiny-taehv"}
    assert all(d["frames"] == 12 and d["total_s"] == d["decode_s"] + d["score_s"] for d in route["decoders"].values())
    assert "Routing-cost phase (UNVERIFIED" in (out / "gpu-check.md").read_text()
    assert set(doc["bench"]["route_overhead_per_block"]) == {"wan_vae", "taehv:tiny-taehv"}
    rows = {r["row"]: r for r in doc["memory_table"]}
    assert set(rows) == {"target krea", "drafter krea", "target self_forcing", "drafter self_forcing",
                         "vae decode", "imagereward"}
    assert all(r["measured_total_bytes"] >= r["weights_bytes"] for r in rows.values())
    assert set(doc["phase_s"]) >= {"build", "benchmark", "memory table", "traffic"}
    # the traffic phase: every kind of block once, for each ImageReward preprocessing path (none cross on a CPU)
    assert doc["traffic"]["pattern"] == ["forced", "accepted", "accepted", "rejected", "accepted"]
    assert [r["preprocessing"] for r in doc["traffic"]["runs"]] == ["pil", "tensor"]
    assert "Host-device traffic per block, measured" in (out / "traffic.md").read_text()
    assert "Peer ratio: not run" in (out / "gpu-check.md").read_text()
    assert "CUDA graph phase (UNVERIFIED" in (out / "gpu-check.md").read_text()
    assert doc["cuda_graph"]["skipped"] == "not on CUDA"  # a CPU has no CUDA graph: test_cuda_graph_phase_runs_... below


def test_gpu_model_is_roofline():
    cls = units.CallClass("denoise", "target", 3, 3)
    h100, h200 = gc_.GPUS["h100"], gc_.GPUS["h200"]
    compute_bound = gc_.call_seconds(cls, 1.5e14, 3e10, h100)
    assert compute_bound == pytest.approx(1.5e14 / (h100.bf16_flops * 0.40) + 0.02)
    memory_bound = gc_.call_seconds(cls, 1e9, 3e10, h100)
    assert memory_bound > gc_.call_seconds(cls, 1e9, 3e10, h200)  # more bandwidth, same FLOP/s


def test_dynamic_vram_phase_is_labelled_unverified():
    """The --comfyui Dynamic VRAM phase (tests/comfy_dynamic_vram_run.py on CUDA) is reported as unverified, with
    ComfyUI's load / free events summarised; a failed run says so."""
    doc = {"dynamic_vram": ["ModelPatcherDynamic", True], "decisions": ["forced", "accepted"], "memo_registered": True,
           "memo_bytes": 2 * 2**30, "events": [{"load": [{"dynamic": True}]},
                                               {"free_memory": {"for_dynamic": True, "pins_required": 0}},
                                               {"free_memory": {"for_dynamic": False, "pins_required": 2**30}}]}
    md = gc_.dynamic_vram_markdown(doc)
    assert "UNVERIFIED" in md and "ModelPatcherDynamic (dynamic True)" in md and "1 load calls, 2 free calls" in md
    assert "largest pins_required 1.00 GiB" in md and "memo registered True holding 2.00 GiB" in md
    assert "failed: boom" in gc_.dynamic_vram_markdown({"error": "boom"})


# ------------------------------------------------------------------------------------------- the CUDA graph phase
cg = importlib.import_module("cuda_graph")


def test_dry_run_makes_the_cuda_graph_block_calls_at_full_size_on_meta(measured):
    """The phase's block calls on the 1.3B and 14B meta models (shapes only; a value read would raise there): the
    flow's shape, and the same static input tensors (latents, timestep, KV buffer, write index, RoPE grids) from call
    to call, what a CUDA graph replay reads."""
    g = measured.cuda_graph
    assert g["label"].startswith("UNVERIFIED")
    for role in ("drafter", "target"):
        assert g[role]["output_shape"] == [1, 3, 16, 60, 104] and g[role]["ok"], g[role]
        assert set(g[role]["static_inputs_reused"]) >= {"x", "t", "k0", "v0", "index", "rope_cos", "rope_sin"}
    assert "static inputs reused: True" in gc_.dry_run_markdown(gc_.price_plan(_plan(), measured))


class CPUGraph:
    """A stand-in for torch.cuda.CUDAGraph on the CPU: `capture(fn)` runs it once and keeps its output; `replay()`
    runs it again into that output (what a graph's replay does with its static buffers)."""

    def capture(self, fn):
        self.fn = fn
        self.out = fn()
        return self.out

    def replay(self):
        self.out.copy_(self.fn())


class StaleGraph(CPUGraph):
    """A graph whose replay does not follow its inputs (what a call reading non-static data would give)."""

    def replay(self):
        pass


def test_cuda_graph_phase_runs_on_the_cpu_with_a_stand_in_graph(tmp_path):
    """The phase's code on the tiny models: the block call's static inputs, replay against eager, the next block
    (context rebuilt into the same KV buffer, new latents in the same input); a replay that ignores its inputs is
    caught by the next block's diff."""
    from sdvg_core import tiny_models

    m = tiny_models(seed=0, workdir=tmp_path)
    doc = cg.phase(m, (4, 4), graph_cls=CPUGraph, sync=lambda: None)
    for role in ("drafter", "target"):
        r = doc[role]
        assert "error" not in r, r
        assert r["static"]["ok"] and r["max_abs_diff"] == 0.0 and r["max_abs_diff_next_block"] == 0.0
        assert r["output_scale"] > 0 and r["eager_median_s"] > 0
    assert "replay vs eager" in cg.markdown(doc)
    stale = cg.capture_and_replay(cg.block_call(m.drafter, (4, 4)), graph_cls=StaleGraph, sync=lambda: None)
    assert stale["max_abs_diff"] == 0.0 and stale["max_abs_diff_next_block"] > 1e-3


def test_ar_sampler_phase_is_labelled_unverified():
    """The --comfyui AR sampler phase (tests/comfy_ar_gpu_run.py on CUDA) is reported as unverified, with what SDVG's
    model calls saw of the compiler switches and what they were after; a failure or a skip says so."""
    doc = {"patcher": ["ModelPatcherDynamic", True], "size": [320, 192], "target_only_max_abs_diff": 0.01,
           "scale": 9.0, "core_seconds": 1.0, "sdvg_target_only_seconds": 2.0, "sdvg_seconds": 1.5,
           "switches_before": {"disable_comfy_compiler": False, "disable_cuda_graphs": False},
           "switches_seen_by_sdvg_calls": ["(True, True)"],
           "switches_after": {"disable_comfy_compiler": False, "disable_cuda_graphs": False},
           "graphs_opened_while_sdvg_sampled": 0, "noise_device": "cuda:0", "noise_rule_max_abs_diff": 0.0}
    md = gc_.ar_sampler_markdown(doc)
    assert "UNVERIFIED" in md and "ModelPatcherDynamic (dynamic True)" in md and "seen by SDVG's calls ['(True, True)']" in md
    assert "graphs opened while SDVG sampled 0" in md and "noise rule on cuda:0" in md
    assert "failed: boom" in gc_.ar_sampler_markdown({"error": "boom"})
    assert "skipped: no AR nodes" in gc_.ar_sampler_markdown({"skipped": "no AR nodes"})
