"""The gpu-check's CUDA graph phase (issue 33 item 3): one steady-state block call captured as a CUDA graph and
replayed, against eager. UNVERIFIED until it runs on a GPU.

The call is Krea's steady state at the run's size: 3 committed context frames in a 6-frame window, the block's
3 frames appended as scratch at one denoising step. Everything it reads lives in static buffers: its latents
(`x`, refilled in place for a new block), its timestep tensor (one per step: a step is a graph), the KV buffer (one
per run, written in place by the context call between blocks) and the cache's device inputs (write index, span,
mask: kv_cache.KVInputs, refilled in place per call) and RoPE grids (RopeTables.into). So the graph captured for
one block is replayed for the next: the phase rebuilds the context eagerly with other latents, refills `x`,
replays, and compares with an eager call of that block.

On a CPU (`gpu-check --dry-run`) the same call is made on the full-size meta models (shapes only; a value read on
meta would raise): its output shape, that its static inputs are the same tensors from call to call (what a replay
needs), and that it allocates no new KV storage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from sdvg_core.sampling.timesteps import timestep_tensor
from sdvg_core.models.kv_cache import KVCache
from sdvg_core.models.wan import CausalWan

CONTEXT_FRAMES = 3  # Krea's kv_cache_num_frames
BLOCK_FRAMES = 3
STEP_T = 937.5  # a Krea denoising step (the second of krea_plan's five)
WARMUP_CALLS = 3  # eager calls on a side stream before capture (cuBLAS workspaces, lazy tables, caches)
TIMED_CALLS = 5  # per variant, interleaved
# block calls (or replays) per role, for the time estimate: eager reference, warm-up, capture, replay, the next
# block's context call, eager and replay, and the timed ones
CALLS_PER_ROLE = 1 + WARMUP_CALLS + 1 + 1 + 3 + 2 * TIMED_CALLS
LABEL = "UNVERIFIED: the CUDA graph phase has never run on a GPU"


@dataclass
class BlockCall:
    """A steady-state block call with static inputs: `x` [1, 3, C, h, w] refilled in place, the KV view with its
    context committed, one timestep tensor."""

    dit: CausalWan
    x: torch.Tensor
    t: torch.Tensor
    text: object
    kv: KVCache
    latent_hw: tuple[int, int]

    def __call__(self) -> torch.Tensor:
        return self.dit.forward(self.x, self.t, self.text, kv=self.kv, frame_offset=CONTEXT_FRAMES).flow

    def new_context(self, context: torch.Tensor) -> None:
        """The next block's context rebuilt eagerly into the same buffer (Krea's rebuild): a new view of it."""
        empty = KVCache.on(self.kv.buffer)
        self.kv = self.dit.forward(context, timestep_tensor(0.0, 1, CONTEXT_FRAMES, self.dit.device),
                                      self.text, kv=empty, commit=True, want_output=False).kv

    def statics(self) -> dict[str, torch.Tensor]:
        """The tensors the call reads besides the weights (what a replay needs at the same addresses)."""
        write = self.kv.append(BLOCK_FRAMES, CONTEXT_FRAMES).open()
        inputs = write.inputs()
        h, w = self.latent_hw
        ph, pw = self.dit.cfg.patch_size[1:]
        rope = self.dit.rope.into("query", tuple(range(CONTEXT_FRAMES, CONTEXT_FRAMES + BLOCK_FRAMES)), h // ph,
                                     w // pw)
        out = {"x": self.x, "t": self.t, "k0": self.kv.buffer.k[0], "v0": self.kv.buffer.v[0], "index": inputs.index,
               "rope_cos": rope.cos, "rope_sin": rope.sin}
        if inputs.mask is not None:
            out["mask"] = inputs.mask
        return out


def block_call(dit: CausalWan, latent_hw: tuple[int, int], text_len: int | None = None, seed: int = 0) -> BlockCall:
    """Krea's steady-state block call for `dit` at latent size `latent_hw`, random inputs (on the meta device:
    shapes only). The context is committed by one context call into a fresh 6-frame window."""
    cfg, dev = dit.cfg, dit.device
    h, w = latent_hw
    meta = dev.type == "meta"
    gen = None if meta else torch.Generator(device=dev).manual_seed(seed)

    def randn(*shape):
        return torch.empty(shape, device=dev) if meta else torch.randn(shape, generator=gen, device=dev)

    text = dit.encode_text(randn(1, text_len or cfg.text_len, cfg.text_dim))
    tpf = cfg.tokens_per_frame(h, w)
    kv = KVCache.empty(cfg, batch=1, window_frames=CONTEXT_FRAMES + BLOCK_FRAMES, tokens_per_frame=tpf, device=dev,
                       dtype=dit.dtype)
    call = BlockCall(dit, randn(1, BLOCK_FRAMES, cfg.in_dim, h, w), timestep_tensor(STEP_T, 1, BLOCK_FRAMES, dev),
                     text, kv, latent_hw)
    call.new_context(randn(1, CONTEXT_FRAMES, cfg.in_dim, h, w))
    return call


def check_static(call: BlockCall) -> dict:
    """Two calls: the same static tensors (objects and storage) and the same KV buffer, the output's shape. Runs on
    any device, meta included (where a value read would raise)."""
    before = call.statics()
    a = call()
    b = call()
    after = call.statics()
    same = {k: after[k] is before[k] for k in before}
    return {"output_shape": list(a.shape), "same_shape": list(a.shape) == list(b.shape),
            "static_inputs_reused": same, "ok": all(same.values()) and list(a.shape) == list(b.shape)}


def capture_and_replay(call: BlockCall, graph_cls=None, sync=None) -> dict:
    """Capture the block call as a CUDA graph (after warm-up calls on a side stream), replay it against eager, then
    rebuild the context with new latents, refill `x`, replay again against eager; time eager against replay,
    interleaved. `graph_cls` / `sync`: torch.cuda.CUDAGraph / torch.cuda.synchronize (a stand-in in CPU tests)."""
    cuda = graph_cls is None
    graph_cls = graph_cls or torch.cuda.CUDAGraph
    sync = sync or (torch.cuda.synchronize if cuda else (lambda: None))
    eager = call().clone()
    if cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                call()
        torch.cuda.current_stream().wait_stream(side)
    else:
        for _ in range(WARMUP_CALLS):
            call()
    graph = graph_cls()
    if cuda:
        with torch.cuda.graph(graph):
            out = call()
    else:
        out = graph.capture(call)
    graph.replay()
    sync()
    first = (out.float() - eager.float()).abs().max().item()
    # the next block: new context in the same KV buffer, new latents in the same x
    gen = torch.Generator(device=call.x.device).manual_seed(1)
    call.new_context(torch.randn(call.x.shape, generator=gen, device=call.x.device, dtype=call.x.dtype))
    call.x.copy_(torch.randn(call.x.shape, generator=gen, device=call.x.device, dtype=call.x.dtype))
    eager2 = call().clone()
    graph.replay()
    sync()
    second = (out.float() - eager2.float()).abs().max().item()
    times = {"eager": [], "graph": []}
    for _ in range(TIMED_CALLS):
        for name, fn in (("eager", call), ("graph", graph.replay)):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"label": LABEL, "max_abs_diff": first, "max_abs_diff_next_block": second,
            "eager_median_s": med["eager"], "graph_median_s": med["graph"],
            "speed_vs_eager": med["eager"] / med["graph"] if med["graph"] else None,
            "output_scale": eager.float().abs().max().item()}


def phase(models, latent_hw: tuple[int, int], graph_cls=None, sync=None) -> dict:
    """The phase over both DiTs (their own block call each)."""
    out = {"label": LABEL}
    for role in ("drafter", "target"):
        dit = getattr(models, role)
        try:
            call = block_call(dit, latent_hw)
            out[role] = {"static": check_static(call), **capture_and_replay(call, graph_cls, sync)}
        except Exception as e:  # a first GPU run must still write what the other phases found
            out[role] = {"error": f"{type(e).__name__}: {e}"}
    return out


def dry_run(models, latent_hw: tuple[int, int]) -> dict:
    """The phase's CPU part on the full-size meta models: the block calls' shapes and static inputs."""
    return {"label": LABEL, **{role: check_static(block_call(getattr(models, role), latent_hw, text_len=8))
                               for role in ("drafter", "target")}}


def markdown(d: dict) -> str:
    lines = [f"CUDA graph phase ({d['label']}):" + (f" skipped: {d['skipped']}" if "skipped" in d else "")]
    for role in ("drafter", "target"):
        r = d.get(role, {})
        if "error" in r:
            lines.append(f"- {role}: failed: {r['error'][-300:]}")
        elif "max_abs_diff" in r:
            lines.append(f"- {role}: replay vs eager max |diff| {r['max_abs_diff']:.3g} (next block "
                         f"{r['max_abs_diff_next_block']:.3g}, output scale {r['output_scale']:.3g}); eager "
                         f"{r['eager_median_s'] * 1e3:.1f} ms, replay {r['graph_median_s'] * 1e3:.1f} ms "
                         f"({r['speed_vs_eager']:.2f}x)")
        elif "static" in r or "output_shape" in r:
            s = r.get("static", r)
            lines.append(f"- {role}: block call {s['output_shape']}, static inputs reused: {s['ok']}")
    return "\n".join(lines) + "\n"
