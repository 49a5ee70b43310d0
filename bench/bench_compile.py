"""Whole-block compile benchmark (issue 33 items 2-3): compilations per recipe and role, and the compiled block
against eager and against the old regional compile, on this machine.

    /work/main/.venv/bin/python bench/bench_compile.py [--what all|counts|timing] [--blocks 300] [--rounds 5]
                                                        [--threads 2] [--dtypes fp32,bf16] [--json PATH] [--md PATH]

- counts: a `--blocks`-block run per recipe (krea, self_forcing, longlive, longlive_infinity) with the demo's two
  tiny widths (drafter and target compile apart), a prompt switch half way and a start image (every call shape:
  block, commit / rebuild, masked fill-up, recache, prefix), both DiTs compiled with torch's cheap "eager" backend
  (graph structure, not speed). Per recipe and role, from torch._dynamo.utils.counters: `compile: {graph_breaks,
  compilations}`, beside the distinct call shapes the dit made (CausalWan.call_shapes: the bound) and
  torch._dynamo.explain's graph breaks over one layer call. The compiled run's latents against eager's.
- timing: one 3-frame block call (Krea's steady state: 3 committed context frames + the block, a 6-frame window)
  at the 1.3B widths with 2 layers (1,170 query tokens, 2,340 keys, text 512 tokens), `--threads` threads:
  eager, the whole-block compile (CausalWan(compile=True): inductor) and the old regional compile (three
  static regions per layer, attention eager over the cache prefix: `RegionalWan`, the code before issue 33)
  in interleaved rounds (the order rotated per round), per dtype; ratios of medians against eager, max |diff|.
  The first call's compile time in a cold process (empty inductor cache) and in a second process (its on-disk
  cache warm), each a fresh interpreter.
Writes JSON (`--json`) and a markdown summary (`--md`); a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdvg_core import (CausalWan, Engine, EngineConfig, FixedPattern, GenerationSpec, PixelInput,  # noqa: E402
                       PromptConditioning, tiny_models)
from sdvg_core.demo.tiny import DEMO_PROMPT  # noqa: E402
from sdvg_core.engine.prompts import PromptSchedule  # noqa: E402
from sdvg_core.engine.recipes import recipe_by_name  # noqa: E402
from sdvg_core.sampling.timesteps import timestep_tensor  # noqa: E402
from sdvg_core.io.text import demo_embeddings  # noqa: E402
from sdvg_core.models.kv_cache import KVCache, attention_span  # noqa: E402
from sdvg_core.models.wan import (ForwardOutput, _gate, _modulate, attention, block_qkv, build_random,  # noqa: E402
                                  wan_block)
from sdvg_core.models.dtypes import DTYPES as ALL_DTYPES  # noqa: E402
from sdvg_core.models.wan_config import PRESETS  # noqa: E402

RECIPES = ("krea", "self_forcing", "longlive", "longlive_infinity")
ROLES = ("drafter", "target")
TIMING_LAYERS = 2  # issue 33's CPU setting: the 1.3B widths, 2 layers
TIMING_HW = (30, 52)  # latent grid: 15 x 26 patches = 390 tokens per frame, 1,170 per 3-frame block
CONTEXT_FRAMES = 3  # Krea's kv_cache_num_frames
DTYPES = {k: ALL_DTYPES[k] for k in ("fp32", "bf16")}  # the dtypes this benchmark compares
VARIANTS = ("eager", "whole_block", "regional")


# ------------------------------------------------------------------------------------------- the old regional compile
def block_cross_query(block: nn.Module, x_res: torch.Tensor, y_self: torch.Tensor, gate: torch.Tensor, tpf: int,
                      heads: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(before issue 33) Self-attention output + gated residual, then the cross-attention query [B, N, S, D]."""
    b, s, _ = x_res.shape
    x_res = x_res + _gate(block.self_attn.o(y_self), gate, tpf)
    ca = block.cross_attn
    hc = x_res.to(dtype) if isinstance(block.norm3, nn.Identity) else block.norm3(x_res).to(dtype)
    return x_res, ca.norm_q(ca.q(hc)).view(b, s, heads, -1).transpose(1, 2)


def block_ffn(block: nn.Module, x_res: torch.Tensor, y_cross: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor,
              gate: torch.Tensor, tpf: int, dtype: torch.dtype) -> torch.Tensor:
    """(before issue 33) Cross-attention output + residual, then the modulated, gated FFN."""
    x_res = x_res + block.cross_attn.o(y_cross).float()
    h = _modulate(block.norm2(x_res), shift, scale, tpf).to(dtype)
    return x_res + _gate(block.ffn(h), gate, tpf)


class RegionalWan(CausalWan):
    """CausalWan as it was before issue 33, for comparison: three static-shape regions per layer compiled apart
    (q/k/v + RoPE; o + residual + cross query; cross o + FFN), attention eager over the cache's occupied prefix
    (its key length grows), the KV write by slices."""

    def __init__(self, *a, compile: bool | str = False, **kw):
        super().__init__(*a, **kw)
        self._regions = (block_qkv, block_cross_query, block_ffn)
        if compile:
            backend = "inductor" if compile is True else str(compile)
            self._regions = tuple(torch.compile(fn, dynamic=False, backend=backend) for fn in self._regions)

    @torch.no_grad()
    def forward(self, x, t, text, *, frame_offset=0, kv=None, commit=False, want_output=True, hook=None,
                interrupt=None):
        self.calls += 1
        tokens, grid = self._patchify(x, None)
        (f, h, w) = grid
        e, e0 = self._embed_time(t, None)
        write = self._open(kv, f, h * w, frame_offset)
        rope = self.rope.at(tuple(range(frame_offset, frame_offset + f)), h, w)
        qkv_fn, cross_fn, ffn_fn = self._regions
        n, dt, tpf, x_res = self.cfg.num_heads, self.dtype, h * w, tokens
        for i, block in enumerate(self.net.blocks):
            sh1, sc1, g1, sh2, sc2, g2 = (e0 + self._param(block.modulation)[:, None]).unbind(2)
            q, k, v = qkv_fn(block, x_res, sh1, sc1, rope, tpf, n, dt, True)
            if write is not None:
                write.write(i, k, v)
                k, v = write.keys(i), write.values(i)
            y = attention(q, k, v)
            x_res, qc = cross_fn(block, x_res, y, g1, tpf, n, dt)
            yc = attention(qc, text.k[i], text.v[i])
            x_res = ffn_fn(block, x_res, yc, sh2, sc2, g2, tpf, dt)
        new_kv = None if write is None else write.commit() if commit else kv
        return ForwardOutput(self._head(x_res, e, grid, None) if want_output else None, new_kv)


# ------------------------------------------------------------------------------------------------------ counts
def _spec(blocks: int) -> GenerationSpec:
    first = PromptConditioning.make(DEMO_PROMPT, demo_embeddings(DEMO_PROMPT, 32))
    other = PromptConditioning.make("another prompt", demo_embeddings("another prompt", 32))
    image = torch.rand(1, 16, 16, 3, generator=torch.Generator().manual_seed(3))
    return GenerationSpec(PromptSchedule.of([(0, first), (blocks // 2, other)]), 16, 16, blocks, 5,
                          pixels=PixelInput.start_image(image))


def _pattern(blocks: int) -> tuple[bool, ...]:
    """Block 0 forced, then 3 of every 4 accepted: both roles generate blocks all along."""
    return (False,) + tuple(b % 4 != 0 for b in range(1, blocks))


class FreeDecodeVAE:
    """The tiny VAE with a free decode (black frames of the right size; encodes are the VAE's own): the counts
    measure the DiTs' compiled calls, and decoding hundreds of blocks would take most of the run."""

    @staticmethod
    def install(vae) -> None:
        base = type(vae)

        def decode_stream(self, z_chunk, cache=None, rule="standard", interrupt=None):
            cache = self.empty_decoder_cache(rule) if cache is None else cache
            t = z_chunk.shape[2]
            frames = self.config.pixel_frames(t, includes_first=cache.frames_consumed == 0)
            b, _, _, h, w = z_chunk.shape
            scale = 2 ** (len(self.config.dim_mult) - 1)
            return (torch.zeros(b, 3, frames, h * scale, w * scale),
                    type(cache)(cache.histories, cache.frames_consumed + t, cache.rule))

        vae.__class__ = type("FreeDecode" + base.__name__, (base,), {"decode_stream": decode_stream})


def compile_counts(blocks: int, workdir: Path) -> dict:
    """Per recipe and role: graphs compiled and graph breaks over a `blocks`-block run (torch's counters), the
    dit's distinct call shapes, explain's breaks over one layer call, and the run's max |diff| against eager."""
    from torch._dynamo.utils import counters

    m = tiny_models(seed=0, workdir=workdir)
    FreeDecodeVAE.install(m.vae)
    spec, pattern = _spec(blocks), _pattern(blocks)
    out = {}
    for name in RECIPES:
        recipe = recipe_by_name(name)
        t0 = time.perf_counter()
        want = Engine(m.target, m.vae, m.drafter, None, EngineConfig(recipe=recipe)).generate(
            spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
        eager_s = time.perf_counter() - t0
        torch._dynamo.reset()
        counters.clear()
        dits = {role: CausalWan(r.net, r.cfg, key=r.key, compile="eager") for role, r in
                   (("drafter", m.drafter), ("target", m.target))}
        made = {role: {"compilations": 0, "graph_breaks": 0} for role in ROLES}
        for role, dit in dits.items():
            forward = dit.forward

            def counted(*a, _f=forward, _role=role, **kw):
                g, b = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
                try:
                    return _f(*a, **kw)
                finally:
                    made[_role]["compilations"] += counters["stats"]["unique_graphs"] - g
                    made[_role]["graph_breaks"] += sum(counters["graph_break"].values()) - b
            dit.forward = counted
        engine = Engine(dits["target"], m.vae, dits["drafter"], None, EngineConfig(recipe=recipe))
        t0 = time.perf_counter()
        got = engine.generate(spec, FixedPattern(pattern, score_drafts=False)).committed_latents()
        compiled_s = time.perf_counter() - t0
        capacity = recipe.window_frames(spec.frames_per_block, spec.num_latent_frames + 1)
        spans = len({attention_span(e, capacity) for e in range(1, capacity + 1)})
        out[name] = {role: {"compile": made[role], "call_shapes": len(dits[role].call_shapes),
                            "calls": dits[role].calls} for role in ROLES}
        out[name]["kv_capacity_frames"] = capacity
        out[name]["spans"] = spans
        out[name]["bound"] = 2 * spans + 3
        out[name]["max_abs_diff_vs_eager"] = (got - want).abs().max().item()
        out[name]["seconds"] = {"eager": round(eager_s, 2), "compiled_eager_backend": round(compiled_s, 2)}
        print(f"[counts] {name}: " + ", ".join(f"{r} {out[name][r]['compile']} ({out[name][r]['call_shapes']} call "
                                                f"shapes)" for r in ROLES) + f", diff {out[name]['max_abs_diff_vs_eager']:.1e}",
              flush=True)
    out["explain"] = explain_one_call()
    torch._dynamo.reset()
    return out


def explain_one_call() -> dict:
    """torch._dynamo.explain over one cached layer call of the tiny DiT (a masked span): graphs and breaks."""
    cfg = PRESETS["tiny"]
    run = CausalWan(build_random(cfg, 0), cfg)
    gen = torch.Generator().manual_seed(0)
    text = run.encode_text(torch.randn(1, 8, cfg.text_dim, generator=gen))
    x = torch.randn(1, 3, cfg.in_dim, 4, 6, generator=gen)
    seen = []
    run._block = lambda *a, **kw: (seen.append((a, kw)), wan_block(*a, **kw))[1]
    kv = KVCache.empty(cfg, batch=1, window_frames=9, tokens_per_frame=6, device="cpu", dtype=torch.float32)
    kv = run.forward(x, timestep_tensor(0.0, 1, 3), text, kv=kv, commit=True).kv
    run.forward(x, timestep_tensor(700.0, 1, 3), text, kv=kv, frame_offset=3)
    a, kw = seen[-1]
    e = torch._dynamo.explain(wan_block)(*a, **kw)
    return {"graph_count": e.graph_count, "graph_break_count": e.graph_break_count, "masked": a[4].kv.mask is not None}


# ------------------------------------------------------------------------------------------------------ timing
def _timing_setup(dtype: torch.dtype, seed: int = 0):
    cfg = PRESETS["wan2.1-t2v-1.3b"]
    cfg = type(cfg)(**{**cfg.__dict__, "num_layers": TIMING_LAYERS, "name": "wan2.1-1.3b-widths-2-layers"})
    net = build_random(cfg, seed, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randn(1, cfg.text_len, cfg.text_dim, generator=gen)
    h, w = TIMING_HW
    x = torch.randn(1, 3, cfg.in_dim, h, w, generator=gen)
    context = torch.randn(1, CONTEXT_FRAMES, cfg.in_dim, h, w, generator=gen)
    return cfg, net, ctx, x, context


def _variant(name: str, cfg, net, dtype):
    if name == "eager":
        return CausalWan(net, cfg, dtype=dtype)
    if name == "whole_block":
        return CausalWan(net, cfg, dtype=dtype, compile=True)
    return RegionalWan(net, cfg, dtype=dtype, compile=True)


class BlockCall:
    """One dit's steady-state Krea block call: 3 context frames committed into a 6-frame window, then the timed
    denoising call of 3 frames appended as scratch (repeatable on the same view)."""

    def __init__(self, dit: CausalWan, cfg, ctx, x, context):
        tpf = cfg.tokens_per_frame(*TIMING_HW)
        self.dit, self.x = dit, x
        self.text = dit.encode_text(ctx)
        kv = KVCache.empty(cfg, batch=1, window_frames=2 * CONTEXT_FRAMES, tokens_per_frame=tpf, device="cpu",
                           dtype=dit.dtype)
        self.kv = dit.forward(context, timestep_tensor(0.0, 1, CONTEXT_FRAMES), self.text, kv=kv, commit=True,
                                 want_output=False).kv
        self.t = timestep_tensor(937.5, 1, 3)

    def __call__(self) -> torch.Tensor:
        return self.dit.forward(self.x, self.t, self.text, kv=self.kv, frame_offset=CONTEXT_FRAMES).flow


def timing(rounds: int, dtype_name: str) -> dict:
    dtype = DTYPES[dtype_name]
    cfg, net, ctx, x, context = _timing_setup(dtype)
    calls, first = {}, {}
    for name in VARIANTS:
        t0 = time.perf_counter()
        calls[name] = BlockCall(_variant(name, cfg, net, dtype), cfg, ctx, x, context)  # compiles the context call
        calls[name]()  # compiles the block call
        first[name] = round(time.perf_counter() - t0, 2)
    outs = {name: call() for name, call in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        for name in order:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
        print(f"[timing {dtype_name}] round {r}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in VARIANTS), flush=True)
    med = {n: statistics.median(v) for n, v in times.items()}
    ratio = {n: [e / t for e, t in zip(times["eager"], times[n])] for n in VARIANTS}
    return {"dtype": dtype_name, "seconds": times, "median_s": med,
            "speed_vs_eager": {n: round(med["eager"] / med[n], 3) for n in VARIANTS},
            "speed_vs_eager_per_round_median": {n: round(statistics.median(v), 3) for n, v in ratio.items()},
            "max_abs_diff_vs_eager": {n: (outs[n].float() - outs["eager"].float()).abs().max().item() for n in VARIANTS},
            "setup_and_first_calls_s": first}


def first_call(variant: str, dtype_name: str) -> dict:
    """In this (fresh) process: seconds of the variant's first block call (compiling) and of its second."""
    dtype = DTYPES[dtype_name]
    cfg, net, ctx, x, context = _timing_setup(dtype)
    dit = _variant(variant, cfg, net, dtype)
    t0 = time.perf_counter()
    call = BlockCall(dit, cfg, ctx, x, context)  # text K/V, then the context call: its two graphs compile
    t1 = time.perf_counter()
    call()  # the block call's graph compiles
    t2 = time.perf_counter()
    call()
    t3 = time.perf_counter()
    return {"context_call_first_s": round(t1 - t0, 2), "first_s": round(t2 - t1, 2), "second_s": round(t3 - t2, 3),
            "graphs": len(dit.call_shapes)}


def cold_and_warm(threads: int, dtype_name: str) -> dict:
    """The whole-block compile's first call in a cold process (empty inductor cache) and in a second process with
    that cache on disk (each a fresh interpreter: nothing in memory)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": os.path.join(cache, "triton")}
        for label in ("cold_process", "second_process"):
            res = subprocess.run([sys.executable, __file__, "--what", "first-call", "--threads", str(threads),
                                  "--dtypes", dtype_name], env=env, capture_output=True, text=True, check=True)
            out[label] = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"[first call {dtype_name}] {label}: {out[label]}", flush=True)
    return out


def markdown(doc: dict) -> str:
    lines = [f"# Whole-block compile ({doc['machine']}, torch {doc['torch']}, {doc['threads']} threads)", ""]
    if "counts" in doc:
        c = doc["counts"]
        lines += [f"Compilations over a {doc['blocks']}-block run (tiny widths, backend eager; a prompt switch, a start "
                  "image):", "", "| recipe | role | compilations | graph breaks | call shapes | bound 2*spans+3 | "
                  "max diff vs eager |", "|---|---|---|---|---|---|---|"]
        for name in RECIPES:
            for role in ROLES:
                r = c[name][role]
                lines.append(f"| {name} | {role} | {r['compile']['compilations']} | {r['compile']['graph_breaks']} | "
                             f"{r['call_shapes']} | {c[name]['bound']} | {c[name]['max_abs_diff_vs_eager']:.1e} |")
        lines += ["", f"explain over one masked layer call: {c['explain']}", ""]
    for t in doc.get("timing", []):
        lines += [f"One Krea block call at the 1.3B widths, {TIMING_LAYERS} layers, {t['dtype']} "
                  f"({len(t['seconds']['eager'])} interleaved rounds):", "",
                  "| variant | median s | speed vs eager | max diff vs eager |", "|---|---|---|---|"]
        for n in VARIANTS:
            lines.append(f"| {n} | {t['median_s'][n]:.3f} | {t['speed_vs_eager'][n]:.3f}x | "
                         f"{t['max_abs_diff_vs_eager'][n]:.1e} |")
        lines.append("")
    for dt, fc in doc.get("first_call", {}).items():
        c, w = fc["cold_process"], fc["second_process"]
        lines.append(f"First whole-block calls ({dt}; a steady call takes {c['second_s']} s): cold process: the "
                     f"context call {c['context_call_first_s']} s, the block call {c['first_s']} s; second process "
                     f"(warm inductor cache): {w['context_call_first_s']} s and {w['first_s']} s.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", default="all", choices=("all", "counts", "timing", "first-call"))
    ap.add_argument("--blocks", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--variant", default="whole_block", choices=VARIANTS)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    if a.what == "first-call":
        print(json.dumps(first_call(a.variant, dtypes[0])))
        return
    doc = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": a.threads,
           "blocks": a.blocks, "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:])}
    if a.what in ("all", "counts"):
        with tempfile.TemporaryDirectory() as d:
            doc["counts"] = compile_counts(a.blocks, Path(d))
        doc["compile"] = {name: {role: doc["counts"][name][role]["compile"] for role in ROLES} for name in RECIPES}
    if a.what in ("all", "timing"):
        doc["timing"] = [timing(a.rounds, d) for d in dtypes]
        doc["first_call"] = {d: cold_and_warm(a.threads, d) for d in dtypes}
    text = json.dumps(doc, indent=1)
    if a.json:
        a.json.write_text(text)
    if a.md:
        a.md.write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
