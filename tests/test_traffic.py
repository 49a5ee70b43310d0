"""bench/traffic.py: the host-device traffic counter the GPU check runs.

A CPU has no second device, so the counter's bookkeeping is exercised with the meta device standing in: copies
between CPU and meta, and host reads of values on the side that is not the host."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import traffic  # noqa: E402
from sdvg_core import Engine, EngineConfig, FixedPattern, GenerationSpec, KreaRecipe, PromptConditioning  # noqa: E402
from sdvg_core import tiny_models  # noqa: E402
from sdvg_core.demo.tiny import DEMO_PROMPT  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402

META = torch.device("meta")
CPU = torch.device("cpu")


def test_direction_of_a_copy():
    assert traffic.direction(CPU, CPU) is None
    assert traffic.direction(CPU, torch.device("cuda", 0)) == "to device"
    assert traffic.direction(torch.device("cuda", 0), CPU) == "to host"
    assert traffic.direction(torch.device("cuda", 0), torch.device("cuda", 1)) == "device to device"


def test_counts_crossings_bytes_and_blocks_and_names_the_site():
    """CPU to meta is a device crossing; a dtype change on one device is not; each record carries its block."""
    counter = traffic.TrafficCounter()
    x = torch.ones(4, 5)  # 80 bytes
    with counter:
        x.to(torch.float16)  # same device: no crossing
        x.to(META)  # 80 bytes to the device
        counter.mark_block(1)
        torch.empty(3, device=META).copy_(torch.ones(3, dtype=torch.float64))  # 24 bytes read, 3 x 4 written
        x.sum().item()  # a host tensor: no read of a device value
    s = counter.summary()
    assert s["per_block"] == [{"copies": {"to device": 1}, "bytes": {"to device": 80}, "reads": 0},
                              {"copies": {"to device": 1}, "bytes": {"to device": 12}, "reads": 0}]
    site = "tests/test_traffic.py:test_counts_crossings_bytes_and_blocks_and_names_the_site"
    assert [(r["site"], r["kind"], r["count"], r["bytes"]) for r in s["sites"]] == [(site, "to device", 2, 92)]


def test_reads_of_device_values_are_counted_as_syncs():
    """With meta as the host, CPU tensors stand for device tensors: .item(), bool(), nonzero and a copy back."""
    counter = traffic.TrafficCounter(host=META)
    x = torch.arange(6.0)
    with counter:
        x.sum().item()
        bool(x.sum() > 0)
        x.nonzero()
        x.to(META)
    s = counter.summary()
    assert s["per_block"] == [{"copies": {"to host": 1}, "bytes": {"to host": 24}, "reads": 3}]
    assert {r["kind"]: r["count"] for r in s["sites"]} == {"to host": 1, "read": 3}


@pytest.mark.slow
def test_measure_generation_tallies_every_block_and_changes_nothing(tmp_path):
    """On the tiny CPU engine: one tally per block with its decision, no crossings on a CPU, and the committed
    latents of the observed run equal an unobserved one's (the counter only watches)."""
    m = tiny_models(seed=0, workdir=tmp_path)
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 32, 32, 4, 7)
    pattern = (False, True, False, True)

    def engine():
        return Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(recipe=KreaRecipe()))

    plain = engine().generate(spec, FixedPattern(pattern))
    summary, observed = traffic.measure_generation(engine(), spec, FixedPattern(pattern), cuda_sync_warnings=False)
    assert [b["decision"] for b in summary["per_block"]] == [r.decision for r in plain.blocks]
    assert [b["decision"] for b in summary["per_block"]] == ["forced", "accepted", "rejected", "accepted"]
    assert all(b["copies"] == {} and b["reads"] == 0 for b in summary["per_block"])
    assert summary["cuda_reported_syncs"] is None
    torch.testing.assert_close(observed.committed_latents(), plain.committed_latents(), rtol=0, atol=0)
    md = traffic.markdown({**summary, "preprocessing": "pil"}, "cpu")
    assert md.count("\n| ") >= 1 + len(pattern) + 1  # header row, a row per block, the site table's header


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU check runs this)")
def test_a_cuda_generation_crosses_devices(tmp_path):
    """On a GPU: the gpu-check's traffic phase on the tiny bench models; every block crosses (its noise at least)."""
    import bench_scale as bs
    import gpu_check

    setup, _ = bs.make_setup(bs.parse_args(["--size", "tiny", "--device", "cuda"]), tmp_path)
    doc = gpu_check.measure_traffic(setup)
    assert doc["pattern"] == ["forced", "accepted", "accepted", "rejected", "accepted"]
    for run in doc["runs"]:
        assert all(b["copies"].get("to device", 0) >= 1 for b in run["per_block"])
        assert run["cuda_reported_syncs"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["krea", "self_forcing", "longlive", "longlive_infinity"])
def test_the_block_loop_reads_no_value_between_its_model_calls(tmp_path, name):
    """Graph readiness (what a whole-block compile or CUDA graph needs): every recipe, both roles (a forced, an
    accepted and two rejected blocks: the drafter's and the target's calls in one block), a prompt switch (a
    recache): between a block's first and last model call nothing reads a tensor's value back to Python, on any
    device (a CPU run shows what would be a sync on a GPU): no .item()/float()/bool(), equal, nonzero, .tolist(),
    .numpy(), .cpu(); the router's scoring apart."""
    from sdvg_core.engine.prompts import PromptSchedule
    from sdvg_core.engine.recipes import recipe_by_name

    m = tiny_models(seed=0, workdir=tmp_path)
    first = PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32))
    other = PromptConditioning.make("another prompt", demo_embeddings("another prompt", 32))
    spec = GenerationSpec(PromptSchedule.of([(0, first), (3, other)]), 32, 32, 4, 7)
    engine = Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(recipe=recipe_by_name(name)))
    blocks, _ = traffic.measure_block_reads(engine, spec, FixedPattern((False, True, False, False)))
    assert [b["decision"] for b in blocks] == ["forced", "accepted", "rejected", "rejected"]
    assert all(b["model_calls"] >= 4 for b in blocks)
    assert [b["sites"] for b in blocks] == [{}] * 4 and [b["reads"] for b in blocks] == [0] * 4
    assert blocks[2]["score_reads"] >= 1 and blocks[3]["score_reads"] >= 1  # the router reads inside the block


@pytest.mark.slow
def test_the_routers_tensor_path_reads_only_the_scores(tmp_path):
    """ImageReward's tensor path keeps the frames on the device and its text mask prepared (transformers 5 would read
    whether the prompt is padded): scoring a rejected draft reads one value set back, the scores."""
    from sdvg_core.engine.recipes import recipe_by_name

    m = tiny_models(seed=0, workdir=tmp_path)
    m.scorer.preprocessing = "tensor"
    spec = GenerationSpec(PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32)), 32, 32, 4, 7)
    engine = Engine(m.target, m.vae, m.drafter, m.scorer, EngineConfig(recipe=recipe_by_name("krea")))
    blocks, _ = traffic.measure_block_reads(engine, spec, FixedPattern((False, True, False, False)))
    assert [b["decision"] for b in blocks] == ["forced", "accepted", "rejected", "rejected"]
    assert [b["score_reads"] for b in blocks] == [0, 0, 1, 1] and [b["reads"] for b in blocks] == [0] * 4


def test_the_block_read_counter_sees_python_level_reads():
    """The tracer itself: a read between two model calls is counted on the host too (any_device), the Python-level
    ones (.tolist, .numpy) included, attributed to the calling site; reads outside the calls are apart."""
    counter = traffic.TrafficCounter(any_device=True)
    x = torch.arange(4.0)
    with counter:
        x.tolist()  # before the block's first call
        counter.calls.append((0, counter.tick(), counter.tick()))
        float(x[1]), x.numpy(), x.nonzero(), x.tolist()
        counter.calls.append((0, counter.tick(), counter.tick()))
    (block,) = counter.block_reads(1)
    site = "tests/test_traffic.py:test_the_block_read_counter_sees_python_level_reads"
    assert block["reads"] == 4 and block["reads_outside_calls"] == 1 and block["model_calls"] == 2
    assert block["sites"] == {f"{site} _local_scalar_dense": 1, f"{site} numpy": 1, f"{site} nonzero": 1,
                              f"{site} tolist": 1}
