"""LongLive recipe (frame sink + sliding window, its infinity variant, prompt-switch recache) and Self-Forcing's
window and recache: parity with LongLive v1.0's own inference (the longlive_tiny golden tensors, docs/design.md §2.3),
other sizes / windows / sinks / block counts against a slow reference written here, a 400-block run, flat cost.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sdvg_core.demo.tiny import random_vae
from sdvg_core import (BlockNoise, CausalWan, Engine, EngineConfig, GenerationSpec, LongLiveRecipe,
                       PromptConditioning, PromptSchedule, recipe_by_name, SelfForcingRecipe, TargetOnly, WanDiTConfig,
                       WanVAE, WanVAEConfig)
from sdvg_core.sampling.timesteps import FlowMatchSchedule, add_noise, flow_to_x0, self_forcing_plan, timestep_tensor
from sdvg_core.derived.tally import Tally
from sdvg_core.models.kv_cache import KVCopyStats, KVWrite
from sdvg_core.models.wan import KVCache, WanDiT, build_random
from sdvg_core.models.wan_config import PRESETS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_compile import FreeDecodeVAE  # noqa: E402  (the benchmark's free-decode VAE: black frames, real shapes)

TOL = 1e-4  # the fixture's own harness differs from causal_wan_tiny by 1.3e-6; real bugs are >= 1e-2


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
            query = tuple(range(n - f, n)) if slot else tuple(range(frame_offset, frame_offset + f))
            self.log.append(Call(f, float(t[0, 0]), frame_offset, commit, x.detach().clone(),
                                 out.flow if want_output else probe, [k.clone() for k in ks], [v.clone() for v in vs],
                                 tuple(ids), query, tuple(range(n)) if slot else tuple(ids), plan.base.window_frames))
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
    recache call (switch_localsink is the interactive config with global_sink false)."""
    config = ll.meta["configs"]["interactive" if run.startswith("switch") else run]
    mk = config["model_kwargs"]
    recache = [c for c in ll.meta["calls"][run] if c["kind"] == "recache"]
    global_sink = not recache[0]["sink_recache_after_switch"] if recache else config["global_sink"]
    variant = "infinity" if mk.get("use_infinite_attention") else "default"
    return LongLiveRecipe(window=mk["local_attn_size"], sink=mk["sink_size"], variant=variant, global_sink=global_sink)


def _fixture_engine(ll: LongLiveFixture, recipe, tracer=None) -> Engine:
    """The fixture's models and noise; the engine counts its KV copies (`engine.services.kv_copies`)."""
    F, noise_in = ll.frames_per_block, ll.inputs

    def noise(spec, b):  # the fixture's pre-drawn noise, re-noising draws as [steps-1, B, F, C, h, w]
        return BlockNoise(noise_in["initial_noise"][:, F * b:F * (b + 1)], noise_in["renoise_noise"][b][:, None])

    vae = WanVAE.from_state_dict(ll.vae_weights, config=ll.vae_cfg)
    vae.key = "fixture-vae"
    dit = RecordingWan(ll.net, ll.cfg, key="longlive-tiny-dit")
    return Engine(dit, vae, config=EngineConfig(recipe=recipe), noise_fn=noise, tracer=tracer, kv_copies=KVCopyStats())


def _fixture_spec(ll: LongLiveFixture, run: str) -> GenerationSpec:
    """Prompt A, and for a switch run prompt B from the first block starting at or after the switch frame."""
    F = ll.frames_per_block
    _, frames, _, h, w = ll.inputs["initial_noise"].shape
    scale = 2 ** (len(ll.vae_cfg.dim_mult) - 1)
    a = PromptConditioning.make("prompt A", ll.inputs["text_A"])
    switches = ()
    if run.startswith("switch"):
        first = -(-ll.meta["geometry"]["switch_frame"] // F)
        switches = ((first, PromptConditioning.make("prompt B", ll.inputs["text_B"])),)
    return GenerationSpec(PromptSchedule.of(((0, a),) + switches), w * scale, h * scale, frames // F, seed=0,
                          frames_per_block=F)


def _run_fixture(ll: LongLiveFixture, run: str):
    """Target-only over the whole fixture, then the last block's commit (made when a next block would need it)."""
    recipe = _fixture_recipe(ll, run)
    traced: dict[str, torch.Tensor] = {}
    engine = _fixture_engine(ll, recipe, tracer=lambda n, t: traced.__setitem__(n, t.detach().clone()))
    spec = _fixture_spec(ll, run)
    state = engine.generate(spec, TargetOnly())
    recipe.context(engine.services, "target", engine.target, state, spec.num_blocks, Tally())
    return engine, state, traced


_LABEL = re.compile(r"b(\d+)(?:s(\d+)|(c))$")


@pytest.mark.slow
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
    assert engine.services.kv_copies.forks == 0  # a linear run never copies cached keys/values
    print(f"\n[parity longlive_tiny {run}] {len(R)} tensors, {len(log)} calls; "
          + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
    assert max(worst.values()) <= TOL, worst


# ---------------------------------------------------------------------------------------------------------
# Other sizes, windows, sinks, block counts and switches: a slow reference written from the rule
# ---------------------------------------------------------------------------------------------------------

def _compact_view(cfg: WanDiTConfig, frames: list[int], kv: dict, extra: int, tpf: int, rope: str) -> KVCache:
    """A fresh cache holding exactly `frames` (their stored keys/values, in this order) with room for `extra` more:
    the reference's attention set built by hand, bypassing the ring, eviction and rewrite machinery under test."""
    view = KVCache.empty(cfg, batch=1, window_frames=len(frames) + extra, tokens_per_frame=tpf, device="cpu",
                         dtype=torch.float32, rope=rope)
    buf = view.buffer
    for j, f in enumerate(frames):
        for i in range(cfg.num_layers):
            buf.k[i][:, :, j * tpf:(j + 1) * tpf] = kv[f][0][i]
            buf.v[i][:, :, j * tpf:(j + 1) * tpf] = kv[f][1][i]
    clock = buf.stamp(tuple(range(len(frames))))
    return KVCache(buf, 0, 0, len(frames), tuple(frames), (clock,) * len(frames))


def slow_reference(run: CausalWan, texts: list, noises: list[BlockNoise], F: int, tpf: int, window: int, sink: int,
                   rope: str, global_sink: bool, prompt_of: list[int]):
    """LongLive's rule spelled out (docs/design.md §2.3): every call is a full-attention forward over
    exactly the frames the rule says it sees, in logical order, with their RoPE positions (baked: each key at its own
    frame index, queries at theirs; slot: position = index in the attended list).
    - the sink is the first `sink` frames ever committed; the window the newest committed frames such that sink +
      window + the block's own frames fit `window` (evicted once per block, the same for all its calls);
    - a block is denoised by the plan's steps, then committed by a t = 0 call whose keys/values are stored;
    - a prompt switch before block b recaches the newest min(window, generated) frames under the new prompt at t = 0:
      kept sink (global_sink, recached frames not starting at 0): the frames past the sink are recomputed
      attending to the old sink and themselves; otherwise all are, and the first become the sink.
    Returns the x0 of every step [block][step], the committed video, and the final (sink, window, stored K/V)."""
    cfg, plan = run.cfg, self_forcing_plan()
    kv: dict[int, tuple[list, list]] = {}
    sink_frames: list[int] = []
    win: list[int] = []
    committed: list[torch.Tensor] = []

    def latents(frames: list[int]) -> torch.Tensor:  # committed latent frames (contiguous)
        return torch.cat(committed, dim=1)[:, frames[0]:frames[-1] + 1]

    def call(frames, x, t, text, offset, keep):
        view = _compact_view(cfg, frames, kv, x.shape[1], tpf, rope)
        out = run.forward(x, timestep_tensor(t, 1, x.shape[1]), text, frame_offset=offset, kv=view, commit=True)
        if keep:
            n = x.shape[1]
            for j in range(n):
                sl = slice((len(frames) + j) * tpf, (len(frames) + j + 1) * tpf)
                kv[offset + j] = ([out.kv.keys(i)[:, :, sl].clone() for i in range(cfg.num_layers)],
                                  [out.kv.values(i)[:, :, sl].clone() for i in range(cfg.num_layers)])
        return out.flow

    x0s = []
    for b, noise in enumerate(noises):
        text = texts[prompt_of[b]]
        if b > 0 and prompt_of[b] != prompt_of[b - 1]:  # recache under the new prompt
            end = b * F
            n = len(sink_frames) + len(win)
            first = end - n
            if global_sink and first > 0 and sink_frames:
                redo = list(range(first + len(sink_frames), end))
                call(sink_frames, latents(redo), 0.0, text, redo[0], keep=True)
                win = redo
            else:
                redo = list(range(first, end))
                call([], latents(redo), 0.0, text, first, keep=True)
                sink_frames, win = redo[:sink], redo[sink:]
        e = max(0, len(sink_frames) + len(win) + F - window) if len(sink_frames) >= sink else 0
        attended = sink_frames + win[e:]
        x, steps = noise.initial, []
        for s, t in enumerate(plan.timesteps):
            flow = call(attended, x, t, text, b * F, keep=False)
            x0 = flow_to_x0(x, flow, plan.sigmas[s])
            steps.append(x0)
            if s + 1 < plan.num_steps:
                x = add_noise(x0, noise.renoise[s], plan.sigmas[s + 1])
        x0s.append(steps)
        committed.append(steps[-1])
        call(attended, steps[-1], 0.0, text, b * F, keep=True)
        win = win[e:]
        for f in range(b * F, b * F + F):
            (sink_frames if len(sink_frames) < sink else win).append(f)
    return x0s, torch.cat(committed, dim=1), sink_frames, win, kv


OTHER = {  # name: (recipe, frames per block, blocks, first block of each later prompt, DiT config, latent h x w)
    "window9_sink0_20blocks": (LongLiveRecipe(window=9, sink=0), 3, 20, (), "tiny", (4, 6)),
    "window15_sink6": (LongLiveRecipe(window=15, sink=6), 3, 12, (), "other", (4, 8)),
    "window10_sink2_infinity": (LongLiveRecipe(window=10, sink=2, variant="infinity"), 3, 14, (), "tiny", (6, 4)),
    "F2_window7_sink3_switches_localsink": (LongLiveRecipe(window=7, sink=3, global_sink=False), 2, 16, (5, 11),
                                            "other", (4, 6)),
    "infinity_switches_globalsink": (LongLiveRecipe(window=12, sink=3, variant="infinity"), 3, 12, (2, 7), "tiny",
                                     (4, 6)),
    "self_forcing_global_switch": (SelfForcingRecipe(), 3, 7, (4,), "tiny", (4, 6)),
    "self_forcing_window6_switch": (SelfForcingRecipe(window=6), 3, 9, (5,), "other", (4, 6)),
}
OTHER_CFG = WanDiTConfig(name="ll-other", dim=96, ffn_dim=160, num_heads=3, num_layers=3, text_dim=24)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(OTHER), ids=list(OTHER))
def test_append_cache_recipes_match_slow_reference(case):
    """Other model sizes, windows, sinks (none, one block, more than a block, not block-aligned evictions), frames per
    block, block counts and prompt switches (both sink rules, before and after the window is full): every step's
    x0, the output and the final cache (frames and keys/values) equal the slow reference's."""
    recipe, F, blocks, switch_at, cfg_name, (h, w) = OTHER[case]
    cfg = PRESETS["tiny"] if cfg_name == "tiny" else OTHER_CFG
    net = build_random(cfg, seed=3)
    gen = torch.Generator().manual_seed(11)
    prompts = [PromptConditioning.make(f"prompt {i}", torch.randn(1, 7, cfg.text_dim, generator=gen))
               for i in range(len(switch_at) + 1)]
    spec = GenerationSpec(PromptSchedule.of(zip((0, *switch_at), prompts)), w * 8, h * 8, blocks, seed=5,
                          frames_per_block=F)
    shape = (1, F, cfg.in_dim, h, w)
    noises = [BlockNoise(torch.randn(shape, generator=gen), torch.randn((3, *shape), generator=gen))
              for _ in range(blocks)]
    traced: dict[str, torch.Tensor] = {}
    dit = CausalWan(net, cfg, key=f"dit-{cfg_name}")
    copies = KVCopyStats()
    engine = Engine(dit, random_vae(0), config=EngineConfig(recipe=recipe), noise_fn=lambda spec, b: noises[b],
                    tracer=lambda n, t: traced.__setitem__(n, t.detach().clone()), kv_copies=copies)
    state = engine.generate(spec, TargetOnly())
    final = recipe.context(engine.services, "target", dit, state, blocks, Tally())[0]  # commits the last block
    assert copies.forks == 0

    window, sink, rope = recipe.cache_layout(spec)
    prompt_of = [spec.segment_of(b) for b in range(blocks)]
    texts = [dit.encode_text(p.embeddings) for p in prompts]
    ref_x0, ref_video, ref_sink, ref_win, ref_kv = slow_reference(
        CausalWan(net, cfg), texts, noises, F, cfg.tokens_per_frame(h, w), window, sink, rope,
        recipe.rule().keep_sink, prompt_of)
    worst = {"x0": 0.0, "kv": 0.0}
    for b in range(blocks):
        for s in range(len(ref_x0[b])):
            worst["x0"] = max(worst["x0"], _maxdiff(traced[f"target/block{b}/step{s}/x0_pred"], ref_x0[b][s]))
    worst["output"] = _maxdiff(state.committed_latents(), ref_video)
    assert list(final.frame_ids) == ref_sink + ref_win
    tpf = final.tokens_per_frame
    for i in range(cfg.num_layers):
        ref_k = torch.cat([ref_kv[f][0][i] for f in final.frame_ids], dim=2)
        ref_v = torch.cat([ref_kv[f][1][i] for f in final.frame_ids], dim=2)
        assert final.keys(i).shape[2] == len(final.frame_ids) * tpf
        worst["kv"] = max(worst["kv"], _maxdiff(final.keys(i), ref_k), _maxdiff(final.values(i), ref_v))
    print(f"\n[slow reference {case}] " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert max(worst.values()) <= TOL, worst


# ---------------------------------------------------------------------------------------------------------
# Length: 400 blocks, RoPE past Wan's 1024-row table, flat cost per block
# ---------------------------------------------------------------------------------------------------------

def _tiny_engine(recipe, blocks: int, seed: int = 0):
    cfg = PRESETS["tiny"]
    dit = CausalWan(build_random(cfg, seed=seed), cfg, key=f"tiny-dit-{seed}")
    emb = torch.randn(1, 7, cfg.text_dim, generator=torch.Generator().manual_seed(seed))
    spec = GenerationSpec(PromptConditioning.make("a long video", emb), 48, 32, blocks, seed=seed)
    vae = random_vae(seed)
    FreeDecodeVAE.install(vae)  # these tests measure the DiT's cache; decoding 400 blocks would take most of their time
    return Engine(dit, vae, config=EngineConfig(recipe=recipe), kv_copies=KVCopyStats()), spec


def _record_writes(monkeypatch) -> list[tuple[int, int, int, int]]:
    """Per KV write the forward opens: (id of the buffer, attended tokens, written tokens, frames in the call)."""
    from sdvg_core.models import kv_cache

    log: list[tuple[int, int, int, int]] = []
    init = kv_cache.OpenKVWrite.__init__

    def spy(self, base, plan):
        init(self, base, plan)
        log.append((id(self.buffer), self.key_tokens, sum(b - a for a, b, _ in self.runs), plan.frames))

    monkeypatch.setattr(kv_cache.OpenKVWrite, "__init__", spy)
    return log


@pytest.mark.slow
def test_400_blocks_flat_cost_and_rope_past_the_table(monkeypatch):
    """LongLive's default variant over 400 blocks (absolute RoPE positions up to 1199, past Wan's 1024-row table):
    it runs end to end, every call attends to the same number of keys once the window is full, writes one block,
    into the same buffer, and no cached key or value is ever copied; a block costs the same at b = 10 and b = 300."""
    blocks = 400
    recipe = LongLiveRecipe()
    engine, spec = _tiny_engine(recipe, blocks)
    writes = _record_writes(monkeypatch)
    copies = engine.services.kv_copies
    state = engine.generate(spec, TargetOnly())
    F, steps = spec.frames_per_block, engine.recipe.plan.num_steps
    assert len(state.blocks) == blocks and torch.isfinite(state.committed_latents()).all()
    assert spec.num_latent_frames - 1 >= 1024 + F  # the last blocks' positions are past Wan's table
    assert engine.target.rope.rows >= spec.num_latent_frames  # grown, not capped
    assert copies.forks == 0 and copies.fork_bytes == 0
    assert len({buf for buf, *_ in writes}) == 1  # one buffer for the whole video
    # calls: block 0 makes `steps`; later blocks a commit of the previous block + `steps`
    assert len(writes) == steps + (blocks - 1) * (steps + 1)
    per_block = [writes[0:steps]] + [writes[steps + (b - 1) * (steps + 1):steps + b * (steps + 1)]
                                     for b in range(1, blocks)]
    bytes_per_token = 2 * engine.target.cfg.num_layers * engine.target.cfg.dim * 4  # k and v, every layer, fp32
    moved = [sum(w for _, _, w, _ in calls) * bytes_per_token for calls in per_block]
    attended = [tuple(k for _, k, _, _ in calls) for calls in per_block]
    full = recipe.window // F + 1  # from here on the window is full
    assert len(set(moved[1:])) == 1 and len(set(attended[full:])) == 1
    assert attended[full][0] == recipe.window * engine.target.cfg.tokens_per_frame(*spec.latent_hw)
    assert [b.work["target_forwards"] for b in state.blocks[1:]] == [steps + 1] * (blocks - 1)
    print(f"\n[cost per block] b=10: {moved[10]} bytes written, keys {attended[10]}; b=300: {moved[300]} bytes, "
          f"keys {attended[300]}; forks {copies.forks}")
    assert moved[10] == moved[300] and attended[10] == attended[300]


@pytest.mark.slow
def test_infinity_variant_positions_stay_in_the_window():
    """The infinity cache rotates by slot: after 30 blocks queries still sit at window-F..window-1 and keys at
    0..window-1 (nothing grows), and the output differs from the absolute-RoPE default (the variant is real)."""
    blocks = 30
    outs = {}
    for variant in ("infinity", "default"):
        recipe = LongLiveRecipe(variant=variant)
        engine, spec = _tiny_engine(recipe, blocks)
        engine.target.__class__ = RecordingWan
        engine.target.log = []
        outs[variant] = engine.generate(spec, TargetOnly()).committed_latents()
        last = engine.target.log[-1]
        if variant == "infinity":
            F = spec.frames_per_block
            assert last.query_positions == tuple(range(recipe.window - F, recipe.window))
            assert last.key_positions == tuple(range(recipe.window))
        else:
            assert last.query_positions[0] == (blocks - 1) * spec.frames_per_block
    assert _maxdiff(outs["infinity"], outs["default"]) > 1e-3


# ---------------------------------------------------------------------------------------------------------
# SDVG with windowed recipes: re-queues never read a stale cache; Self-Forcing's window copies nothing
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from sdvg_core import tiny_models

    return tiny_models(seed=0, workdir=tmp_path_factory.mktemp("vocab"))


PAIRS = {  # name: (drafter recipe, target recipe, first block of a second prompt or None)
    "longlive_both": (LongLiveRecipe(window=6, sink=3), LongLiveRecipe(window=6, sink=3), None),
    "longlive_infinity_krea_switch": (LongLiveRecipe(window=9, sink=3, variant="infinity"), recipe_by_name("krea"), 4),
    "sf_window_sf_switch": (SelfForcingRecipe(window=6), SelfForcingRecipe(), 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("pair", list(PAIRS), ids=list(PAIRS))
def test_requeue_with_windowed_caches_equals_a_fresh_run(models, pair):
    """Run with every draft accepted, re-queue with a middle block rejected (as moving tau does): the result is
    bit-identical to a fresh run of the second decisions (the first run's ring caches were overwritten in place: their
    stale views are memo misses, never read), and the blocks before the flip are reused."""
    from sdvg_core import FixedPattern
    from sdvg_core.io.text import demo_embeddings

    drafter_recipe, target_recipe, switch = PAIRS[pair]
    prompts = [PromptConditioning.make(p, demo_embeddings(p, 32)) for p in ("a red fox", "a snowy owl")]
    blocks, k = 8, 5
    spec = GenerationSpec(PromptSchedule.of(((0, prompts[0]),) + (((switch, prompts[1]),) if switch else ())), 48, 32,
                          blocks, seed=3)
    accept_all = FixedPattern((False,) + (True,) * (blocks - 1))
    flip = FixedPattern(tuple(accept_all.decisions[:k]) + (False,) + (True,) * (blocks - k - 1))

    copies = KVCopyStats()

    def engine():
        return Engine(models.target, models.vae, models.drafter, models.scorer,
                      EngineConfig(drafter_recipe=drafter_recipe, target_recipe=target_recipe), kv_copies=copies)

    e = engine()
    first = e.generate(spec, accept_all)
    second = e.generate(spec, flip)
    fresh = engine().generate(spec, flip)
    assert torch.equal(second.committed_latents(), fresh.committed_latents())
    assert [r.decision for r in second.blocks] == [r.decision for r in fresh.blocks]
    assert second.blocks[k].decision == "rejected" and first.blocks[k].decision == "accepted"
    for r in second.blocks[:k]:
        assert r.work["drafter_forwards"] == 0 and r.work["target_forwards"] == 0
    # what the video costs is a fresh run's, whatever a lost cache made this run recompute
    assert [r.cost for r in second.blocks] == [r.cost for r in fresh.blocks]
    print(f"\n[requeue {pair}] drafter context forwards at block k+1: "
          f"{second.blocks[k + 1].work['drafter_context_forwards']} (fresh run: "
          f"{fresh.blocks[k + 1].work['drafter_context_forwards']}), forks {copies.forks}")


def test_self_forcing_window_copies_nothing():
    """SelfForcingRecipe(window=6) over 8 blocks: the old cache forked (copied the whole buffer) on 29 of 39 calls;
    the ring writes in place."""
    engine, spec = _tiny_engine(SelfForcingRecipe(window=6), 8)
    state = engine.generate(spec, TargetOnly())
    assert engine.services.kv_copies.forks == 0 and engine.target.calls == 8 * 4 + 7


@pytest.mark.parametrize("recipe, match", [
    (LongLiveRecipe(window=2), "smaller than a block"),
    (LongLiveRecipe(window=12, sink=13), "between 0 and the window"),
    (LongLiveRecipe(window=5, sink=3), "cannot hold its sink"),
    (LongLiveRecipe(variant="relative"), "variant"),
])
def test_bad_longlive_settings_are_refused_before_any_work(recipe, match):
    engine, spec = _tiny_engine(recipe, 4)
    with pytest.raises(ValueError, match=match):
        engine.start(spec)
    assert engine.target.calls == 0


def test_recipe_names():
    """Every name of the one registry builds its recipe (a dash may stand for an underscore, as the CLI took it)."""
    from sdvg_core import RECIPE_NAMES, KreaRecipe

    assert recipe_by_name("longlive") == LongLiveRecipe()
    assert recipe_by_name("longlive_infinity") == LongLiveRecipe(variant="infinity")
    assert recipe_by_name("longlive-infinity") == LongLiveRecipe(variant="infinity")
    assert recipe_by_name("self-forcing") == recipe_by_name("self_forcing") == SelfForcingRecipe()
    assert RECIPE_NAMES == ("krea", "self_forcing", "longlive", "longlive_infinity")
    assert [type(recipe_by_name(n)) for n in RECIPE_NAMES] == [KreaRecipe, SelfForcingRecipe, LongLiveRecipe,
                                                               LongLiveRecipe]
    assert (LongLiveRecipe().window, LongLiveRecipe().sink, LongLiveRecipe().global_sink) == (12, 3, True)


def test_recipe_parameters_by_name():
    """`name:field=value,...` sets a recipe's parameters (CLI, bench, eval); `recipe_spec` writes it back."""
    from sdvg_core import KreaRecipe
    from sdvg_core.engine.recipes import recipe_spec

    assert recipe_by_name("longlive:window=15,sink=3") == LongLiveRecipe(window=15)
    assert recipe_by_name("longlive: sink = 0 , global_sink = false") == LongLiveRecipe(sink=0, global_sink=False)
    assert recipe_by_name("self_forcing:window=6") == SelfForcingRecipe(window=6)
    assert recipe_by_name("krea:context_frames=5") == KreaRecipe(context_frames=5)
    for r in (LongLiveRecipe(), LongLiveRecipe(window=15, global_sink=False), LongLiveRecipe(variant="infinity"),
              SelfForcingRecipe(window=6), KreaRecipe(context_frames=5), KreaRecipe()):
        assert recipe_by_name(recipe_spec(r)) == r, recipe_spec(r)
    assert recipe_spec(LongLiveRecipe()) == "longlive" and recipe_spec(LongLiveRecipe(window=15)) == "longlive:window=15"
    for bad, message in (("longlive:win=3", "has no parameter 'win'; it has window (default 12)"),
                         ("longlive:window=x", "longlive:window='x': expected int"),
                         ("longlive:global_sink=maybe", "expected bool"),
                         ("longlive:window", "is not field=value"),
                         ("longlive:name=krea", "has no parameter 'name'"),
                         ("rolling:window=3", "unknown context recipe 'rolling'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            recipe_by_name(bad)
