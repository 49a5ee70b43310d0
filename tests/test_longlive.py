"""LongLive recipe (frame sink + sliding window, its infinity variant, prompt-switch recache) and Self-Forcing's
window and recache: parity with LongLive v1.0's own inference (../shared/fixtures/longlive_tiny, LONGLIVE.md),
other sizes / windows / sinks / block counts against a slow reference written here, a 400-block run, flat cost.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.demo.tiny import random_vae
from sdvg_core.engine.engine import Engine, EngineConfig
from sdvg_core.engine.noise import BlockNoise
from sdvg_core.engine.policy import TargetOnly
from sdvg_core.engine.recipes import LongLiveRecipe, SelfForcingRecipe, recipe_by_name
from sdvg_core.engine.schedule import FlowMatchSchedule, add_noise, flow_to_x0, self_forcing_plan, timestep_tensor
from sdvg_core.engine.state import GenerationSpec, PromptConditioning
from sdvg_core.engine.tally import Tally
from sdvg_core.models.kv_cache import KV_COPIES, KVWrite
from sdvg_core.models.vae import WanVAE, WanVAEConfig
from sdvg_core.models.wan import CausalWan, KVCache, WanDiT, build_random
from sdvg_core.models.wan_config import PRESETS, WanDiTConfig

TOL = 1e-4  # LONGLIVE.md §4: the harness itself differs from the shared fixture by 1.3e-6; real bugs are >= 1e-2


# ---------------------------------------------------------------------------------------------------------
# A hook around the production forward
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Call:
    """One model call as the engine made it: what the cache showed it (logical order) and what it returned."""

    frames: int
    t: float
    offset: int
    commit: bool
    x: torch.Tensor
    flow: torch.Tensor | None
    k: list[torch.Tensor]  # per layer [B, heads, tokens, head_dim], logical slot order, the call's own frames included
    v: list[torch.Tensor]
    ids: tuple[int, ...]  # latent frame in each logical slot after the call
    query_positions: tuple[int, ...]
    key_positions: tuple[int, ...]
    slots: int  # the buffer's frame slots


class RecordingWan(CausalWan):
    """Records every call of the production forward. A context forward's output, which production skips
    (want_output=False), is computed by a second forward on a private copy of the cache, so the production path
    computes exactly what it always does and the copy leaves no trace."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.log: list[Call] = []

    def forward(self, x, t, text, *, frame_offset=0, kv=None, commit=False, want_output=True, **kw):
        probe = None
        if kv is not None and not want_output:
            copy = KVWrite(kv.base.clone(), kv.op) if isinstance(kv, KVWrite) else kv.clone()
            probe = super().forward(x, t, text, frame_offset=frame_offset, kv=copy, want_output=True, **kw).flow
            self.calls -= 1
        out = super().forward(x, t, text, frame_offset=frame_offset, kv=kv, commit=commit, want_output=want_output,
                              **kw)
        if kv is not None:
            plan = kv if isinstance(kv, KVWrite) else kv.append(x.shape[1], frame_offset)
            if commit:
                view = out.kv
                layers = range(len(view.buffer.k))
                ks, vs, ids = [view.keys(i) for i in layers], [view.values(i) for i in layers], view.frame_ids
            else:
                ks, vs, ids = plan.snapshot()
            n, f = len(ids), x.shape[1]
            slot = plan.rope == "slot"
            self.log.append(Call(f, float(t[0, 0]), frame_offset, commit, x.detach().clone(),
                                 out.flow if want_output else probe, [k.clone() for k in ks], [v.clone() for v in vs],
                                 tuple(ids), tuple(range(n - f, n)) if slot else tuple(range(frame_offset, frame_offset + f)),
                                 tuple(range(n)) if slot else tuple(ids), plan.base.window_frames))
        return out


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float().reshape(a.shape)).abs().max().item()


# ---------------------------------------------------------------------------------------------------------
# The longlive_tiny golden tensors
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LongLiveFixture:
    """longlive_tiny: meta.json, the tiny DiT (causal_wan_tiny weights), the fixture VAE, inputs; sizes from meta."""

    meta: dict
    cfg: WanDiTConfig
    net: WanDiT
    vae_cfg: WanVAEConfig
    vae_weights: dict
    inputs: dict
    frames_per_block: int
    num_blocks: int
    dir: object


@pytest.fixture(scope="module")
def ll() -> LongLiveFixture:
    from conftest import require_shared

    fx = require_shared("fixtures")
    d = fx / "longlive_tiny"
    meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    cfg = WanDiTConfig.from_mapping(meta["model_config"], name="longlive_tiny")
    net = WanDiT(cfg).eval()
    net.load_state_dict(load_file((d / meta["weights"]["file"]).resolve()), strict=True)
    vm = json.loads((fx / "wan_vae_tiny" / "meta.json").read_text())["vae_config"]
    vcfg = WanVAEConfig(name="fixture-vae", dim=vm["dim"], z_dim=vm["z_dim"], dim_mult=tuple(vm["dim_mult"]),
                        num_res_blocks=vm["num_res_blocks"], attn_scales=tuple(vm["attn_scales"]),
                        temporal_downsample=tuple(vm["temperal_downsample"]))
    geo = meta["geometry"]
    inputs = load_file(d / "inputs.safetensors")
    assert inputs["initial_noise"].shape[1] == geo["num_latent_frames"]
    assert cfg.tokens_per_frame(geo["H"], geo["W"]) == geo["frame_seq_length"]
    return LongLiveFixture(meta, cfg, net, vcfg, load_file(fx / "wan_vae_tiny" / "weights.safetensors"), inputs,
                           geo["frames_per_block"], geo["num_blocks"], d)


def _fixture_recipe(ll: LongLiveFixture, run: str) -> LongLiveRecipe:
    """The recipe of a run as the reference ran it: window, sink and variant from its config, global_sink from its
    recache call (LONGLIVE.md §3: switch_localsink is the interactive config with global_sink false)."""
    config = ll.meta["configs"]["interactive" if run.startswith("switch") else run]
    mk = config["model_kwargs"]
    recache = [c for c in ll.meta["calls"][run] if c["kind"] == "recache"]
    global_sink = not recache[0]["sink_recache_after_switch"] if recache else config["global_sink"]
    return LongLiveRecipe(window=mk["local_attn_size"], sink=mk["sink_size"],
                          variant="infinity" if mk.get("use_infinite_attention") else "default", global_sink=global_sink)


def _fixture_engine(ll: LongLiveFixture, recipe, tracer=None) -> Engine:
    F, noise_in = ll.frames_per_block, ll.inputs

    def noise(spec, b):  # the fixture's pre-drawn noise, re-noising draws as [steps-1, B, F, C, h, w]
        return BlockNoise(noise_in["initial_noise"][:, F * b:F * (b + 1)], noise_in["renoise_noise"][b][:, None])

    vae = WanVAE.from_state_dict(ll.vae_weights, config=ll.vae_cfg)
    vae.key = "fixture-vae"
    runner = RecordingWan(ll.net, ll.cfg, key="longlive-tiny-dit")
    return Engine(runner, vae, config=EngineConfig(recipe=recipe), noise_fn=noise, tracer=tracer)


def _fixture_spec(ll: LongLiveFixture, run: str) -> GenerationSpec:
    """Prompt A, and for a switch run prompt B from the first block starting at or after the switch frame."""
    F = ll.frames_per_block
    _, frames, _, h, w = ll.inputs["initial_noise"].shape
    scale = 2 ** (len(ll.vae_cfg.dim_mult) - 1)
    a = PromptConditioning.make("prompt A", ll.inputs["text_A"])
    switches = ()
    if run.startswith("switch"):
        switches = ((-(-ll.meta["geometry"]["switch_frame"] // F), PromptConditioning.make("prompt B", ll.inputs["text_B"])),)
    return GenerationSpec(a, w * scale, h * scale, frames // F, seed=0, frames_per_block=F, switches=switches)


def _run_fixture(ll: LongLiveFixture, run: str):
    """Target-only over the whole fixture, then the last block's commit (made when a next block would need it)."""
    recipe = _fixture_recipe(ll, run)
    traced: dict[str, torch.Tensor] = {}
    engine = _fixture_engine(ll, recipe, tracer=lambda n, t: traced.__setitem__(n, t.detach().clone()))
    spec = _fixture_spec(ll, run)
    KV_COPIES.reset()
    state = engine.generate(spec, TargetOnly())
    recipe.context(engine.services, "target", engine.target, state, spec.num_blocks, Tally())
    return engine, state, traced


_LABEL = re.compile(r"b(\d+)(?:s(\d+)|(c))$")


@pytest.mark.parametrize("run", ["single", "infinity", "switch_globalsink", "switch_localsink"])
def test_longlive_matches_reference(ll, run):
    """Every tensor of the run: outputs, x0 per step, commit outputs, recache output and x0, KV snapshots and the
    frame in each slot, plus every call's frames, timestep, attended frames and RoPE positions (meta.json).

    The cache is a ring: physically, slots are not in the reference's order (it shifts the window down once per
    block). Every comparison is in LOGICAL slot order (sink first, then the window oldest to newest), which is the
    reference's physical order; `slot_frame` lists the frame in each logical slot, -1 past the occupied ones.
    """
    R = load_file(ll.dir / f"run_{run}.safetensors")
    ref_calls = ll.meta["calls"][run]
    engine, state, traced = _run_fixture(ll, run)
    log = engine.target.log
    assert len(log) == len(ref_calls), [c["label"] for c in ref_calls]
    F, L = ll.frames_per_block, ll.cfg.num_layers
    plan = engine.recipes["target"].plan
    sigma0 = FlowMatchSchedule().sigma(0.0)
    worst: dict[str, float] = {}
    used: set[str] = set()

    def check(family: str, name: str | None, got: torch.Tensor, ref: torch.Tensor) -> None:
        worst[family] = max(worst.get(family, 0.0), _maxdiff(got, ref))
        if name:
            used.add(name)

    by_label = {}
    for call, ref in zip(log, ref_calls):
        label = ref["label"]
        by_label[label] = call
        assert (call.frames, call.offset) == (ref["num_frames"], ref["current_start_frame"]), label
        assert call.t == pytest.approx(ref["timestep"]), label
        assert call.commit == (ref["kind"] in ("commit", "recache")), label
        assert list(call.ids) == ref["attended_frames"], label
        assert list(call.ids) + [-1] * (call.slots - len(call.ids)) == ref["slot_frames_after"], label
        assert list(call.query_positions) == ref["rope_query_time_positions"], label
        assert list(call.key_positions) == ref["rope_key_time_positions"], label
        m = _LABEL.match(label)
        if label == "recache":
            check("recache/flow_pred", "recache/flow_pred", call.flow, R["recache/flow_pred"])
            check("recache/x0_pred", "recache/x0_pred", flow_to_x0(call.x, call.flow, sigma0), R["recache/x0_pred"])
        elif m.group(3):  # a commit: its raw output (production skips it; computed on a copy)
            b = int(m.group(1))
            check("commit_flow_pred", "commit_flow_pred", call.flow, R["commit_flow_pred"][b])
            assert torch.equal(call.x, state.blocks[b].latents)
        else:  # a denoising step: the engine's own x0 (traced) and the model output behind it
            b, s = int(m.group(1)), int(m.group(2))
            x0 = traced[f"target/block{b}/step{s}/x0_pred"]
            check("denoised_steps", "denoised_steps", x0, R["denoised_steps"][b, s])
            check("denoised_steps", None, flow_to_x0(call.x, call.flow, plan.sigmas[s]), R["denoised_steps"][b, s])
    for snap, label in ll.meta["snapshots"][run].items():
        call = by_label[label]
        ref_ids = R[f"kv/{snap}/slot_frame"]
        used.add(f"kv/{snap}/slot_frame")
        assert torch.equal(torch.tensor(list(call.ids) + [-1] * (call.slots - len(call.ids))), ref_ids), snap
        n = len(call.ids) * (call.k[0].shape[2] // len(call.ids))
        for i in range(L):
            for kind, got in (("k", call.k[i]), ("v", call.v[i])):
                ref = R[f"kv/{snap}/layer{i}/{kind}"]  # [B, tokens, heads, head_dim]
                check(f"kv_{kind}", f"kv/{snap}/layer{i}/{kind}", got.transpose(1, 2), ref[:, :n])
                assert not ref[:, n:].any(), f"{snap}: the reference wrote past the occupied slots"
    check("output_latents", "output_latents", state.committed_latents(), R["output_latents"])
    assert used == set(R), sorted(set(R) - used)  # every tensor of the run was compared
    assert KV_COPIES.forks == 0  # a linear run never copies cached keys/values
    print(f"\n[parity longlive_tiny {run}] {len(R)} tensors, {len(log)} calls; "
          + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
    assert max(worst.values()) <= TOL, worst
